#include "sass.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace rt_moe::test {
namespace {

namespace fs = std::filesystem;

struct CommandRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

CommandRun run_command(const std::string& command) {
  CommandRun run;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[1 << 16];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;) {
    run.output.append(buffer, n);
  }
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string find_nvdisasm(std::string* why) {
  std::string tried;
  auto runs = [&](const std::string& candidate) {
    if (candidate.empty() || tried.find("\n  " + candidate + ":") != std::string::npos) {
      return false;
    }
    const CommandRun run = run_command(quoted(candidate) + " --version");
    if (run.exit_code == 0) return true;
    std::string output = run.output;
    while (!output.empty() && output.back() == '\n') output.pop_back();
    tried += "\n  " + candidate + ": " + (output.empty() ? "does not run" : output);
    return false;
  };
  auto env = [](const char* name) {
    const char* value = std::getenv(name);
    return std::string(value != nullptr ? value : "");
  };
  std::vector<std::string> candidates = {env("RT_MOE_NVDISASM"), RT_MOE_NVDISASM_DEFAULT};
  for (const std::string& home :
       {env("CUDA_HOME"), env("CUDA_PATH"), std::string("/usr/local/cuda")}) {
    if (!home.empty()) candidates.push_back(home + "/bin/nvdisasm");
  }
  candidates.push_back("nvdisasm");
  for (const std::string& candidate : candidates) {
    if (runs(candidate)) return candidate;
  }
  if (why != nullptr) {
    *why =
        "no nvdisasm runs (set RT_MOE_NVDISASM, or let scripts/test install PyPI's "
        "nvidia-cuda-nvdisasm into build/_deps); tried:" +
        tried;
  }
  return {};
}

std::string disassemble(const std::string& nvdisasm, const std::string& cubin) {
  char name[] = "/tmp/rt_moe_sass_XXXXXX";
  const int fd = mkstemp(name);
  if (fd < 0) throw std::runtime_error("disassemble: cannot create a temporary file");
  close(fd);
  const fs::path path = name;
  {
    std::ofstream out(path, std::ios::binary);
    out.write(cubin.data(), std::streamsize(cubin.size()));
    if (!out) {
      fs::remove(path);
      throw std::runtime_error("disassemble: cannot write " + path.string());
    }
  }
  const std::string command = quoted(nvdisasm) + " -c " + quoted(path.string());
  CommandRun run = run_command(command);
  std::error_code ec;
  fs::remove(path, ec);
  if (run.exit_code != 0 || run.output.find("/*0000*/") == std::string::npos) {
    throw std::runtime_error(command + " exited " + std::to_string(run.exit_code) + ":\n" +
                             run.output.substr(0, 4000));
  }
  return std::move(run.output);
}

SassCounts count_sass(const std::string& sass) {
  SassCounts counts;
  std::size_t start = 0;
  while (start < sass.size()) {
    std::size_t end = sass.find('\n', start);
    if (end == std::string::npos) end = sass.size();
    std::string_view line(sass.data() + start, end - start);
    start = end + 1;
    // An instruction line: "/*0120*/", its address, then the instruction; the encoding lines
    // that follow hold only a comment.
    const std::size_t open = line.find("/*");
    const std::size_t close = line.find("*/");
    if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
      continue;
    }
    const std::string_view address = line.substr(open + 2, close - open - 2);
    if (address.empty() ||
        address.find_first_not_of("0123456789abcdef") != std::string_view::npos) {
      continue;
    }
    std::string_view rest = line.substr(close + 2);
    auto next_word = [&rest]() {
      const std::size_t begin = rest.find_first_not_of(' ');
      if (begin == std::string_view::npos) return std::string_view();
      rest.remove_prefix(begin);
      const std::size_t stop = rest.find_first_of(" ;");
      const std::string_view word = rest.substr(0, stop);
      rest.remove_prefix(word.size());
      return word;
    };
    std::string_view opcode = next_word();
    if (!opcode.empty() && opcode.front() == '@') opcode = next_word();  // a predicate
    // Not an instruction: a directive (".byte"), or a line with only comments.
    if (opcode.empty() || opcode.starts_with("/*") || opcode.front() == '.') continue;
    ++counts.instructions;
    const std::string_view base = opcode.substr(0, opcode.find('.'));
    if (base == "HGMMA") {
      ++counts.hgmma;
      // HGMMA.64x<N>x16.F32.BF16
      const std::size_t x1 = opcode.find('x');
      const std::size_t x2 = x1 == std::string_view::npos ? x1 : opcode.find('x', x1 + 1);
      if (x2 != std::string_view::npos) {
        ++counts.hgmma_n[std::atoi(std::string(opcode.substr(x1 + 1, x2 - x1 - 1)).c_str())];
      }
    } else if (base == "HMMA") {
      ++counts.hmma;
    } else if (base == "UTMALDG") {
      ++counts.tma_loads;
      if (opcode.find(".MULTICAST") != std::string_view::npos) ++counts.tma_multicast;
    } else if (base == "UTMAPF") {
      ++counts.tma_prefetch;
    } else if (base == "LDL" || base == "STL") {
      ++counts.local;
    } else if (base == "USETMAXREG") {
      ++counts.setmaxnreg;
    }
  }
  return counts;
}

}  // namespace rt_moe::test
