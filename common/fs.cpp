#include "common/fs.h"

#include <limits.h>
#include <stdlib.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/atomic_file.h"
#include "common/error.h"

namespace ufp4 {

bool is_dir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool file_exists(const std::string& p) { return access(p.c_str(), F_OK) == 0; }

std::string read_text_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(p + ": cannot open for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void walk_files(const std::string& dir, const std::string& ext, std::vector<std::string>& out) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    std::string p = dir + "/" + n;
    if (is_dir(p)) {
      if (n != "site-packages" && n != "dist-packages" && n != "__pycache__") walk_files(p, ext, out);
    } else if (n.size() >= ext.size() && n.compare(n.size() - ext.size(), ext.size(), ext) == 0) {
      out.push_back(p);
    }
  }
  closedir(d);
}

void make_dirs(const std::string& dir) {
  std::string cur;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if ((i == dir.size() || dir[i] == '/') && !cur.empty()) mkdir(cur.c_str(), 0755);
    if (i < dir.size()) cur += dir[i];
  }
  if (!is_dir(dir)) throw RuntimeError(dir + ": cannot create the folder");
  if (access(dir.c_str(), W_OK) != 0) throw RuntimeError(dir + ": the folder is not writable");
}

void write_text_atomically(const std::string& path, const std::string& text) { write_file_atomically(path, text); }

std::string executable_dir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.find_last_of('/'));
}

void refuse_to_replace(const std::string& path, bool told, const std::string& command) {
  if (told || !file_exists(path)) return;
  throw Error(command + ": " + path + " exists and would be replaced (allowed: --force to replace it, or --out FILE to write elsewhere)");
}

bool write_text_if_changed(const std::string& path, const std::string& text, bool told, const std::string& command) {
  if (file_exists(path) && read_text_file(path) == text) return false;
  refuse_to_replace(path, told, command);
  write_text_atomically(path, text);
  return true;
}

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : std::string();
}

std::string repository_root() {
  char buf[4096];
  if (!::getcwd(buf, sizeof buf)) return "";
  for (std::string d = buf;;) {
    if (is_dir(d + "/models/recipes") && is_dir(d + "/experiments") && file_exists(d + "/CMakeLists.txt")) return d;
    if (d == "/") return "";
    const size_t slash = d.find_last_of('/');
    d = slash == 0 ? "/" : d.substr(0, slash);
  }
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::vector<std::string> dir_entries(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
    ::closedir(d);
  }
  return names;
}

std::string first_output_line(const std::string& command) {
  std::string line;
  if (FILE* p = ::popen(command.c_str(), "r")) {
    char buf[512];
    if (std::fgets(buf, sizeof buf, p)) line = buf;
    ::pclose(p);
  }
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace ufp4
