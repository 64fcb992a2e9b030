// emu_api.h: the C interface of the CPU emulator (emu.cc) that driver_emu.go
// calls through cgo.
#ifndef TROUPE_EMU_API_H
#define TROUPE_EMU_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// emu_kernel_id returns the kernel's index, -1 when there is no such kernel,
// -2 when it takes a different number of parameters.
int emu_kernel_id(const char* name, int nargs);
// emu_launch runs kernel id over the grid; non-zero means failure, described
// in msg.
int emu_launch(int id, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
               const uint64_t* args, char* msg, int msglen);
// Emulated device addresses are C heap addresses carried as integers, so
// that Go never converts them to pointers.
uintptr_t emu_alloc(size_t bytes);
void emu_free(uintptr_t p);
void emu_memset32(uintptr_t p, uint32_t v, size_t n);
void emu_htod(uintptr_t dst, const void* src, size_t bytes);
void emu_dtoh(void* dst, uintptr_t src, size_t bytes);
void emu_dtod(uintptr_t dst, uintptr_t src, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
