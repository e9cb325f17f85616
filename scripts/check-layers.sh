#!/usr/bin/env bash
# Checks the includes of every source file under src/ against the layer rules written in
# docs/architecture.md ("Layers", the block between the layer-rules markers): a module
# includes only the modules its rule names, and a `no-io` module no I/O header.
#
#   scripts/check-layers.sh [SRC_DIR [RULES_FILE]]     (defaults: src, docs/architecture.md)
#
# Prints one line per broken rule and exits 1; exits 0 when every include is allowed,
# 2 when the rules cannot be read. Run by ctest (layer_rules) in every CI run.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
src=${1:-$top/src}
rules_file=${2:-$top/docs/architecture.md}

[ -d "$src" ] || { echo "check-layers: no source folder '$src'" >&2; exit 2; }
[ -r "$rules_file" ] || { echo "check-layers: cannot read the rules in '$rules_file'" >&2; exit 2; }

# Headers a `no-io` module must not include: files, sockets, processes.
io_headers=('<fstream>' '<cstdio>' '<stdio.h>' '<filesystem>' '<unistd.h>' '<fcntl.h>'
            '<dirent.h>' '<poll.h>' '<sys/*' '<netinet/*' '<arpa/*'
            '"common/file_util.h"' '"common/subprocess.h"')

modules=()
rule_patterns=()  # one entry per rule: its patterns, space-separated
rule_allowed=()   # one entry per rule: " MODULE MODULE ... " (no-io among them)
rule_text=()
in_block=0
while IFS= read -r line; do
  case "$line" in
    *'<!-- layer-rules:begin -->'*) in_block=1; continue ;;
    *'<!-- layer-rules:end -->'*) in_block=0; continue ;;
  esac
  [ "$in_block" = 1 ] || continue
  line=${line%%#*}
  [[ "$line" =~ ^[[:space:]]*$ || "$line" =~ ^[[:space:]]*\`\`\` ]] && continue
  if [[ "$line" =~ ^[[:space:]]*modules:(.*)$ ]]; then
    read -r -a modules <<<"${BASH_REMATCH[1]}"
    continue
  fi
  if [[ "$line" != *:* ]]; then
    echo "check-layers: $rules_file: a rule without ':' (FILES : MODULES): $line" >&2
    exit 2
  fi
  patterns=$(echo ${line%%:*})
  allowed=$(echo ${line#*:})
  rule_patterns+=("$patterns")
  rule_allowed+=(" $allowed ")
  rule_text+=("$patterns: ${allowed:--}")
done <"$rules_file"
if [ "${#modules[@]}" = 0 ] || [ "${#rule_patterns[@]}" = 0 ]; then
  echo "check-layers: no layer rules (modules: and FILES : MODULES lines) in $rules_file" >&2
  exit 2
fi

# Sets `module` to the module of a path relative to src/: the longest module folder that
# prefixes it ("" for none). A variable, not output: no subshell per include.
module_of() {
  local m
  module=""
  for m in "${modules[@]}"; do
    if [[ "$1" == "$m/"* && ${#m} -gt ${#module} ]]; then module=$m; fi
  done
}

errors=0
fail() {
  echo "$1"
  errors=$((errors + 1))
}

# Every folder directly under src/ is a module.
for d in "$src"/*/; do
  d=$(basename "$d")
  [[ " ${modules[*]} " == *" $d "* ]] || fail "src/$d/: not a module of the layer rules ($rules_file): add it to modules: and give it a rule"
done

while IFS= read -r file; do
  rule=-1
  for i in "${!rule_patterns[@]}"; do
    for p in ${rule_patterns[$i]}; do
      # shellcheck disable=SC2053  # $p is a glob on purpose
      if [[ "$file" == $p ]]; then rule=$i; fi
    done
  done
  if [ "$rule" = -1 ]; then
    fail "src/$file: no layer rule matches it ($rules_file)"
    continue
  fi
  module_of "$file"
  own=$module
  allowed=${rule_allowed[$rule]}
  while IFS= read -r hit; do
    [ -n "$hit" ] || continue
    n=${hit%%:*}
    [[ "${hit#*:}" =~ include[[:space:]]*([<\"][^>\"]*[>\"]) ]] || continue
    inc=${BASH_REMATCH[1]}
    if [[ "$allowed" == *" no-io "* ]]; then
      for h in "${io_headers[@]}"; do
        # shellcheck disable=SC2053
        if [[ "$inc" == $h ]]; then
          fail "src/$file:$n: $inc is I/O, which '${rule_text[$rule]}' forbids (no-io)"
        fi
      done
    fi
    [[ "$inc" == \"* ]] || continue
    target=${inc:1:${#inc}-2}
    module_of "$target"
    mod=$module
    [ -n "$mod" ] || continue  # not a module's header
    [ "$mod" = "$own" ] && continue
    [[ "$allowed" == *" $mod "* ]] && continue
    fail "src/$file:$n: includes $inc of module $mod/, which the rule '${rule_text[$rule]}' does not allow"
  done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]' "$src/$file" || true)
done < <(cd "$src" && find . -type f \( -name '*.cc' -o -name '*.h' -o -name '*.c' -o -name '*.h.in' \) | sed 's|^\./||' | sort)

if [ "$errors" -gt 0 ]; then
  echo "check-layers: $errors include(s) break the layer rules of $rules_file (\"Layers\")"
  exit 1
fi
echo "check-layers: every include follows the layer rules of $rules_file"
