"""Compiler flags for every rdmaplane target, kept in one place."""

RDMAPLANE_COPTS = [
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wshadow",
    "-Wnon-virtual-dtor",
    "-Wno-unused-parameter",
]

RDMAPLANE_TEST_COPTS = RDMAPLANE_COPTS + [
    "-Wno-sign-compare",
]
