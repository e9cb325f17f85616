// Registry<T>: things of kind T (placement policies, queue policies, gate and filter
// plugins) created by name from a factory.
//
// Names are unique: Register refuses a name twice, an empty name or a missing factory.
// An alias maps a second name to a registered one (`default` -> our best policy); it
// cannot point at another alias. Create fails with the known names when the name is
// unknown, with the traits' config check when the config is invalid, and with Internal
// when the factory returns null. List gives registration order, aliases last.
//
// What differs between kinds lives in RegistryTraits<T>, specialised next to T, usually
// as a RegistryNaming:
//   using Config = ...;                           // what a factory is given
//   static constexpr std::string_view kKind;      // "placement policy", in messages
//   static constexpr std::string_view kKnown;     // "known policies", before the list
//   static Status CheckConfig(const Config&);     // Ok, or why the config is invalid
//
// Registering is not thread-safe; creating from a registry that no longer changes is.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool::sched {

template <typename T>
struct RegistryTraits;

// A string literal as a template argument.
template <size_t N>
struct RegistryWords {
  constexpr RegistryWords(const char (&s)[N]) { std::copy_n(s, N, text); }  // NOLINT: implicit
  constexpr std::string_view view() const { return {text, N - 1}; }
  char text[N];
};

// The usual traits: a config type, the words, and a config check that accepts anything
// (a specialisation deriving from it may declare its own CheckConfig).
template <typename C, RegistryWords kind, RegistryWords known>
struct RegistryNaming {
  using Config = C;
  static constexpr std::string_view kKind = kind.view();
  static constexpr std::string_view kKnown = known.view();
  static Status CheckConfig(const Config&) { return Status::Ok(); }
};

template <typename T>
class Registry {
 public:
  using Traits = RegistryTraits<T>;
  using Config = typename Traits::Config;
  using Factory = std::function<std::unique_ptr<T>(const Config& config)>;

  struct Entry {
    std::string name;
    std::string description;  // one line, for listings (`gpupool sim policies`)
    std::string alias_of;     // non-empty for aliases
  };

  Status Register(std::string name, std::string description, Factory factory) {
    if (name.empty())
      return Status::InvalidArgument(fmt::format("{} name is empty", Traits::kKind));
    if (!factory) {
      return Status::InvalidArgument(fmt::format("{} '{}' has no factory", Traits::kKind, name));
    }
    GP_RETURN_IF_ERROR(Unused(name));
    Slot slot{{name, std::move(description), ""}, std::move(factory), slots_.size()};
    slots_.emplace(std::move(name), std::move(slot));
    return Status::Ok();
  }

  Status RegisterAlias(std::string alias, std::string target) {
    auto it = slots_.find(target);
    if (it == slots_.end()) {
      return Status::NotFound(
          fmt::format("alias '{}' points to unknown {} '{}'", alias, Traits::kKind, target));
    }
    if (!it->second.entry.alias_of.empty()) {
      return Status::InvalidArgument(
          fmt::format("alias '{}' points to another alias '{}'", alias, target));
    }
    GP_RETURN_IF_ERROR(Unused(alias));
    Slot slot{{alias, "alias of " + target + ": " + it->second.entry.description, target},
              it->second.factory,
              kAliasOrder + slots_.size()};
    slots_.emplace(std::move(alias), std::move(slot));
    return Status::Ok();
  }

  Result<std::unique_ptr<T>> Create(std::string_view name, const Config& config = {}) const {
    auto it = slots_.find(name);
    if (it == slots_.end()) {
      std::string known;
      for (const Entry& e : List()) known += (known.empty() ? "" : ", ") + e.name;
      return Status::NotFound(
          fmt::format("unknown {} '{}'; {}: {}", Traits::kKind, name, Traits::kKnown, known));
    }
    GP_RETURN_IF_ERROR(Traits::CheckConfig(config));
    std::unique_ptr<T> made = it->second.factory(config);
    if (!made) {
      return Status::Internal(fmt::format("{} '{}' factory returned null", Traits::kKind, name));
    }
    return made;
  }

  bool Contains(std::string_view name) const { return slots_.find(name) != slots_.end(); }

  std::vector<Entry> List() const {
    std::vector<const Slot*> v;
    v.reserve(slots_.size());
    for (const auto& [name, slot] : slots_) v.push_back(&slot);
    std::sort(v.begin(), v.end(), [](const Slot* a, const Slot* b) { return a->order < b->order; });
    std::vector<Entry> out;
    out.reserve(v.size());
    for (const Slot* s : v) out.push_back(s->entry);
    return out;
  }

 private:
  static constexpr size_t kAliasOrder = 1'000'000;  // aliases list after every name

  struct Slot {
    Entry entry;
    Factory factory;
    size_t order = 0;
  };

  Status Unused(const std::string& name) const {
    if (slots_.count(name) == 0) return Status::Ok();
    return Status::AlreadyExists(
        fmt::format("{} '{}' is registered twice; pick another name", Traits::kKind, name));
  }

  std::map<std::string, Slot, std::less<>> slots_;
};

}  // namespace gpupool::sched
