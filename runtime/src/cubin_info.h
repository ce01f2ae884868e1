// What ptxas recorded about a cubin's kernel: its registers a thread and its local memory (the
// stack frame: register spills, or arrays it could not keep in registers), read from the cubin's
// .nv.info section, so that a spill is found without a GPU or a disassembler.
#pragma once

#include <optional>
#include <string_view>

namespace rt_moe {

struct CubinResources {
  int registers = 0;    // EIATTR_REGCOUNT
  int frame_bytes = 0;  // EIATTR_FRAME_SIZE: local memory a thread
  int stack_bytes = 0;  // EIATTR_MIN_STACK_SIZE
  bool uses_local_memory() const { return frame_bytes > 0 || stack_bytes > 0; }
};

// The first kernel's resources of an ELF64 cubin (rt_moe's cubins hold one kernel); nullopt when
// `elf` is no ELF64 image or has no .nv.info section with a register count. Reads only inside
// `elf`, whatever its bytes.
std::optional<CubinResources> cubin_resources(std::string_view elf);

}  // namespace rt_moe
