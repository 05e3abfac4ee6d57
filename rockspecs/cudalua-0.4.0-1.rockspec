-- SPDX-License-Identifier: MIT
-- luarocks --lua-version=5.4 make rockspecs/cudalua-0.4.0-1.rockspec [CUDA_DIR=/usr/local/cuda]
rockspec_format = "3.0"
package = "cudalua"
version = "0.4.0-1"
source = {
  url = "git+file://.",
}
description = {
  summary = "CUDA, scriptable from Lua 5.4",
  detailed = [[
The cuda module binds CUDA devices, streams, events, memory resources,
buffers, run-time compiled programs and kernel launch, after NVIDIA's
cuda.core; the cudalua interpreter preloads it and runs the bundled,
verified benchmarks. The driver is opened at run time, never linked.]],
  license = "MIT",
}
-- The bundled scripts also need argparse (Debian: lua-argparse; else
-- `luarocks install argparse`); the module itself needs nothing more.
dependencies = {
  "lua >= 5.4, < 5.5",
}
-- The CUDA toolkit's headers; its default folder is not on LuaRocks' search
-- path, so say CUDA_DIR=/usr/local/cuda when it is not found.
external_dependencies = {
  CUDA = { header = "cuda.h" },
}
build = {
  type = "command",
  build_command = [[
    test -x configure || autoreconf -fi
    ./configure --prefix="$(PREFIX)" --bindir="$(BINDIR)" --with-cuda="$(CUDA_DIR)" \
      --with-lua-cmoddir="$(LIBDIR)" --with-lua-lmoddir="$(LUADIR)" \
      && make
  ]],
  install_command = "make install",
}
