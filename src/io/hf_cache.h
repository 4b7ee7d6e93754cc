// Offline resolution of a model argument against the Hugging Face cache layout:
//   <hub>/models--<org>--<name>/refs/main           (a commit hash)
//   <hub>/models--<org>--<name>/snapshots/<hash>/   (the files)
// where <hub> is $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub.
#pragma once
#include <string>
#include <vector>

namespace tessera::io {

// An existing file or directory is returned unchanged. Otherwise, for a repo id
// "org/name", the snapshot directory from the first hub that has it. Throws
// Error listing every directory looked in when nothing is found.
std::string resolve_model(const std::string& arg);

// The hub directories searched, in order (only those the environment names).
std::vector<std::string> hf_hub_dirs();

// True for "org/name" where both parts use [A-Za-z0-9._-] and are not "." or "..".
bool looks_like_repo_id(const std::string& arg);

}  // namespace tessera::io
