// What produced a result: version, commit, device, library versions, host and time.
#pragma once
#include <map>
#include <string>

namespace ufp4 {

const char* version();       // e.g. "0.1.0"
const char* git_commit();    // short hash at build time, "+dirty" when the tree had changes
std::string utc_now();       // ISO 8601
std::map<std::string, std::string> provenance();  // keys: ufp4_version, git_commit, host, device, torch, cuda, ...

class H5Writer;
void write_provenance(H5Writer& w);

}  // namespace ufp4
