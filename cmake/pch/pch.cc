// The translation unit that builds the shared precompiled headers (cmake/pch.cmake); it holds no
// code and must not gain any.
