// Placeholder until the core sources land.
