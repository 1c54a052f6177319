// Small filesystem helpers shared by the CLI and the data tool.
#pragma once
#include <string>
#include <vector>

namespace ufp4 {

bool is_dir(const std::string& p);
bool ends_with(const std::string& s, const std::string& suffix);
bool file_exists(const std::string& p);
std::string read_text_file(const std::string& p);  // throws ufp4::Error when unreadable
// Files under `dir` (recursive) ending in `ext`, skipping site-packages, dist-packages, __pycache__.
void walk_files(const std::string& dir, const std::string& ext, std::vector<std::string>& out);
void make_dirs(const std::string& dir);  // mkdir -p; throws ufp4::RuntimeError when not writable
void write_text_atomically(const std::string& path, const std::string& text);
// The folder holding the running executable (for sibling tools).
std::string executable_dir();
// A shell word that the shell reads back as exactly `s` (single-quoted).
std::string shell_quote(const std::string& s);

}  // namespace ufp4
