#include "tests/helpers.h"
#include "tests/tensor_helpers.h"

#include <fstream>

#include "harness/cli/cli.h"
#include "harness/data/data.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/wait.h>

#include <array>
#include <csignal>
#include <cstdio>
#include <exception>
#include <iostream>
#include <sstream>
#include <stdexcept>

#ifdef UFP4_WITH_CUDA
#include "kernels/quantize/quantize_cuda.h"
#endif

namespace ufp4::test {

std::string thrown_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool gpu_available() {
#ifdef UFP4_WITH_CUDA
  return cuda_available();
#else
  return false;
#endif
}

namespace {
torch::Tensor as_bits(const torch::Tensor& t) {
  torch::Tensor c = t.cpu().contiguous();
  switch (c.element_size()) {
    case 1: return c.view(torch::kUInt8).to(torch::kInt64);
    case 2: return c.view(torch::kInt16).to(torch::kInt64);
    case 4: return c.view(torch::kInt32).to(torch::kInt64);
    default: return c.view(torch::kInt64);
  }
}
}  // namespace

int64_t first_bit_mismatch(const torch::Tensor& a, const torch::Tensor& b) {
  if (!a.sizes().equals(b.sizes()) || a.scalar_type() != b.scalar_type()) return 0;
  torch::Tensor ne = as_bits(a).ne(as_bits(b)).flatten();
  if (!ne.any().item<bool>()) return -1;
  return ne.nonzero()[0][0].item<int64_t>();
}

std::string describe_mismatch(const torch::Tensor& a, const torch::Tensor& b, int64_t i) {
  std::ostringstream os;
  if (!a.sizes().equals(b.sizes()) || a.scalar_type() != b.scalar_type()) {
    os << "shape/dtype differ: " << a.sizes() << " " << a.scalar_type() << " vs " << b.sizes() << " " << b.scalar_type();
    return os.str();
  }
  torch::Tensor fa = a.cpu().flatten().to(torch::kFloat64), fb = b.cpu().flatten().to(torch::kFloat64);
  os << "first mismatch at flat index " << i << " of " << a.numel() << ": " << fa[i].item<double>() << " vs " << fb[i].item<double>();
  return os.str();
}

torch::Tensor make_input(const std::string& regime, int64_t rows, int64_t cols, uint64_t seed) {
  torch::manual_seed(seed);
  auto f = torch::TensorOptions().dtype(torch::kFloat32);
  if (regime == "normal") return torch::randn({rows, cols}, f);
  if (regime == "zeros") return torch::zeros({rows, cols}, f);
  if (regime == "subnormal") return torch::randn({rows, cols}, f) * 1e-39f;  // FP32 subnormals
  if (regime == "near_overflow") return torch::randn({rows, cols}, f).clamp(-1, 1) * 3.0e38f;
  if (regime == "outliers") {
    torch::Tensor x = torch::randn({rows, cols}, f);
    return x + (torch::rand({rows, cols}, f) < 0.01).to(torch::kFloat32) * 50.0f * torch::randn({rows, cols}, f);
  }
  if (regime == "dyadic") return torch::randint(-64, 65, {rows, cols}, f) * 0.125f;
  if (regime == "mixed") {
    torch::Tensor x = torch::randn({rows, cols}, f) * torch::exp(torch::randn({rows, 1}, f) * 4);
    if (rows > 2 && cols > 16) {
      x.index_put_({0, torch::indexing::Slice(0, 16)}, 0.0f);       // an all-zero block
      x.index_put_({1, torch::indexing::Slice(0, 16)}, -0.0f);      // negative zeros
      x.index_put_({2, 3}, std::numeric_limits<float>::infinity());  // an inf block
      x.index_put_({rows - 1, cols - 1}, std::numeric_limits<float>::quiet_NaN());
    }
    return x;
  }
  throw std::runtime_error("unknown regime " + regime);
}

namespace {

// The words of a command line: spaces separate, '...' quotes (all the tests' command lines need).
std::vector<std::string> split_words(const std::string& line) {
  std::vector<std::string> words;
  std::string w;
  bool in_word = false, quoted = false;
  for (char c : line) {
    if (quoted) {
      if (c == '\'') quoted = false;
      else w += c;
    } else if (c == '\'') {
      quoted = in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(w);
      w.clear();
      in_word = false;
    } else {
      w += c;
      in_word = true;
    }
  }
  if (quoted) throw std::runtime_error("unbalanced quote in: " + line);
  if (in_word) words.push_back(w);
  return words;
}

}  // namespace

namespace {

CliResult run_cli_from(const std::string& dir, const std::string& args, CliOutput which) {
  const std::vector<std::string> words = split_words(args);
  std::array<char, 4096> cwd{};
  if (!getcwd(cwd.data(), cwd.size())) throw std::runtime_error("getcwd failed");
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  FILE* capture = std::tmpfile();
  const int null_fd = ::open("/dev/null", O_WRONLY);
  const int saved_out = ::dup(1), saved_err = ::dup(2);
  if (!capture || null_fd < 0 || saved_out < 0 || saved_err < 0) throw std::runtime_error("run_cli: cannot redirect the output");
  ::dup2(which == CliOutput::kStderr ? null_fd : ::fileno(capture), 1);
  ::dup2(::fileno(capture), 2);
  int code = -1;
  if (::chdir(dir.c_str()) == 0) code = cli_main(words);
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  ::dup2(saved_out, 1);
  ::dup2(saved_err, 2);
  ::close(saved_out);
  ::close(saved_err);
  ::close(null_fd);
  if (::chdir(cwd.data()) != 0) throw std::runtime_error("run_cli: cannot return to " + std::string(cwd.data()));
  std::string out;
  std::rewind(capture);
  for (int c; (c = std::fgetc(capture)) != EOF;) out += static_cast<char>(c);
  std::fclose(capture);
  return {code, out};
}

}  // namespace

// From the repository root, as a user runs it: manifests name repository-relative paths.
CliResult run_cli(const std::string& args, CliOutput which) { return run_cli_from(UFP4_SOURCE_DIR, args, which); }

CliResult run_cli_in(const std::string& dir, const std::string& args) { return run_cli_from(dir, args, CliOutput::kBoth); }

CliResult run_binary(const std::string& args) {
  const Shell r = sh("cd '" + std::string(UFP4_SOURCE_DIR) + "' && " + std::string(UFP4_BINARY) + " " + args);
  return {r.code, r.out};
}

Shell sh(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[1024];
  while (fgets(buf, sizeof buf, p)) out += buf;
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

SignalledRun run_and_signal(const std::string& command, const std::string& trigger, int sig) {
  int fd[2];
  if (pipe(fd) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    dup2(fd[1], 1);
    dup2(fd[1], 2);
    close(fd[0]);
    close(fd[1]);
    execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fd[1]);
  SignalledRun r{-1, "", false};
  FILE* in = fdopen(fd[0], "r");
  std::array<char, 4096> buf;
  while (fgets(buf.data(), buf.size(), in)) {
    r.out += buf.data();
    if (!r.signalled && r.out.find(trigger) != std::string::npos) r.signalled = kill(pid, sig) == 0;
  }
  fclose(in);
  int status = 0;
  waitpid(pid, &status, 0);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string ci_fixture(const std::string& sub) {
  const std::string dir = std::string(UFP4_SOURCE_DIR) + "/build/ci/" + sub;
  if (access(dir.c_str(), F_OK) != 0)
    throw std::runtime_error(dir + " is missing: it is made by the CTest fixture (cd build && ctest -R ci-train, or ctest -R <entry>, which runs it first)");
  return dir;
}

std::string temp_dir() {
  char tmpl[] = "/tmp/ufp4-test-XXXXXX";
  if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

const std::string& ci_data() {
  static std::string dir = [] {
    std::string d = temp_dir() + "/data";
    DataPrepareOptions o;
    o.out_dir = d;
    o.ci_corpus = true;
    o.tokenizer = "byte";
    run_data_tool_from(UFP4_BINARY, o);
    return d;
  }();
  return dir;
}

std::string write_manifest(const std::string& dir, const std::string& name, const std::string& body) {
  std::string p = dir + "/" + name + ".toml";
  std::ofstream(p) << body;
  return p;
}

std::string tiny_manifest(const std::string& dir, const std::string& recipe, int steps, const std::string& extra, const std::string& model) {
  std::string stem = recipe.substr(recipe.find_last_of('/') + 1);
  if (stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".toml") == 0) stem.resize(stem.size() - 5);
  // [train] defaults; a key that `extra` sets replaces its default line. Two micro-batches of 2 x 64
  // tokens a step: accumulation takes part, and the CPU step stays short (the suite trains hundreds).
  std::string train;
  for (const std::string line : {"steps = " + std::to_string(steps), std::string("batch = 4"), std::string("micro_batch = 2"),
                                 std::string("lr = 3e-3"), std::string("warmup = 5"), std::string("checkpoint_every = 0"),
                                 std::string("log_every = 100"), std::string("device = \"cpu\"")}) {
    const std::string key = line.substr(0, line.find(' '));
    if (extra.rfind(key + " =", 0) != 0 && extra.find("\n" + key + " =") == std::string::npos) train += line + "\n";
  }
  return write_manifest(dir, model + "_" + stem,
                        "[model]\nname = \"" + model + "\"\n[recipe]\nname = \"" + recipe + "\"\n[data]\npath = \"" + ci_data() +
                            "\"\n[train]\n" + train + extra + "[eval]\nevery = 10\nbatches = 2\n[outputs]\ndir = \"" + dir + "/runs\"\n");
}

}  // namespace ufp4::test
