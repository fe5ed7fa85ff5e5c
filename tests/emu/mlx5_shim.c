/* The emulator's libmlx5.so.1 (tests/emu/CMakeLists.txt): it only defines libmlx5's symbol
 * versions, so that the loader accepts a program built against the real library; the mlx5dv_*
 * functions themselves come from the emulator's libibverbs.so.1, which this one needs. */
const char regcache_emu_mlx5_shim[] = "regcache mlx5emu";
