// LookUpJobUser (job_env.h): the agent's side only. A file of its own, outside the unity
// batch, so that the shim, which takes the user from its spec, links no NSS lookup (a
// static-pie shim could not load the NSS modules of another glibc safely).
#include <grp.h>
#include <pwd.h>

#include <algorithm>
#include <vector>

#include "agent/job_env.h"

namespace gpupool::agent {

JobUser LookUpJobUser(uint32_t uid, uint32_t gid) {
  JobUser user;
  user.groups = {gid};
  struct passwd pw;
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return user;
  }
  user.known = true;
  if (pw.pw_dir != nullptr) user.home = pw.pw_dir;
  if (pw.pw_shell != nullptr) user.shell = pw.pw_shell;
  int n = 64;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  if (::getgrouplist(pw.pw_name, gid, groups.data(), &n) < 0 && n > 64) {
    groups.resize(static_cast<size_t>(n));
    ::getgrouplist(pw.pw_name, gid, groups.data(), &n);
  }
  groups.resize(static_cast<size_t>(std::max(n, 0)));
  if (!groups.empty()) user.groups.assign(groups.begin(), groups.end());
  return user;
}

}  // namespace gpupool::agent
