// The kernel templates, embedded at build time (kernel_templates/CMakeLists.txt).
#pragma once

#include <span>
#include <string_view>

namespace rt_moe::detail {

struct EmbeddedFile {
  std::string_view name;  // file name, as #include'd by generated sources
  std::string_view data;  // exact bytes
};

std::span<const EmbeddedFile> embedded_files();

}  // namespace rt_moe::detail
