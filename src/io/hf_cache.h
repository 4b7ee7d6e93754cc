// Offline resolution of a model argument against the Hugging Face cache layout:
//   <hub>/models--<org>--<name>/refs/main           (a commit hash)
//   <hub>/models--<org>--<name>/snapshots/<hash>/   (the files)
// for each <hub> of the directories the program configured (set_hf_hub_dirs; the library reads no environment:
// the tessera command sets $HF_HUB_CACHE, $HF_HOME/hub and ~/.cache/huggingface/hub, see apps/cli_env.h).
#pragma once
#include <string>
#include <vector>

namespace tessera::io {

// An existing file or directory is returned unchanged. Otherwise, for a repo id
// "org/name", the snapshot directory from the first hub that has it. Throws
// Error listing every directory looked in when nothing is found, or saying that no
// hub directory is configured when none is (then only local paths resolve).
std::string resolve_model(const std::string& arg);

// The hub directories resolve_model searches, in order. Process-wide and thread-safe; empty
// until a program sets them (Model::load, AutoTokenizer and open_checkpoint all resolve
// through here).
void set_hf_hub_dirs(std::vector<std::string> dirs);
std::vector<std::string> hf_hub_dirs();

// True for "org/name" where both parts use [A-Za-z0-9._-] and are not "." or "..".
bool looks_like_repo_id(const std::string& arg);

}  // namespace tessera::io
