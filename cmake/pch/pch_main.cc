// The executable that builds the shared precompiled headers for executables (cmake/pch.cmake:
// they compile with -fPIE, which a PCH must match); it does nothing and must not gain any code.
int main() { return 0; }
