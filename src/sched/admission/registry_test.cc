// Registry<T>: one template for placement policies, queue policies, gates and filters.
#include "sched/registry.h"

#include <gtest/gtest.h>

#include "sched/admission/admission.h"
#include "sched/admission/profile.h"

namespace gpupool::sched {
namespace {

struct Widget {
  virtual ~Widget() = default;
  int size = 0;
};
struct WidgetConfig {
  int size = 1;
};

}  // namespace

template <>
struct RegistryTraits<Widget> : RegistryNaming<WidgetConfig, "widget", "known widgets"> {
  static Status CheckConfig(const WidgetConfig& c) {
    return c.size > 0 ? Status::Ok() : Status::InvalidArgument("size must be positive");
  }
};

namespace {

Registry<Widget>::Factory Sized() {
  return [](const WidgetConfig& c) {
    auto w = std::make_unique<Widget>();
    w->size = c.size;
    return w;
  };
}

TEST(Registry, RefusesDuplicatesEmptyNamesAndMissingFactories) {
  Registry<Widget> r;
  ASSERT_TRUE(r.Register("small", "a small one", Sized()).ok());
  Status dup = r.Register("small", "again", Sized());
  EXPECT_EQ(dup.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(dup.message(), "widget 'small' is registered twice; pick another name");
  EXPECT_EQ(r.Register("", "d", Sized()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Register("none", "d", nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(r.Contains("none"));
  // An alias cannot take a used name, point nowhere or point at another alias.
  EXPECT_EQ(r.RegisterAlias("small", "small").code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(r.RegisterAlias("any", "huge").code(), StatusCode::kNotFound);
  ASSERT_TRUE(r.RegisterAlias("default", "small").ok());
  EXPECT_EQ(r.RegisterAlias("default2", "default").code(), StatusCode::kInvalidArgument);
}

TEST(Registry, CreatesByNameOrAliasWithTheConfigItChecks) {
  Registry<Widget> r;
  ASSERT_TRUE(r.RegisterAlias("x", "y").code() == StatusCode::kNotFound);
  ASSERT_TRUE(r.Register("sized", "takes the size", Sized()).ok());
  ASSERT_TRUE(r.RegisterAlias("default", "sized").ok());
  ASSERT_TRUE(r.Register("broken", "returns null", [](const WidgetConfig&) {
                 return std::unique_ptr<Widget>();
               }).ok());
  auto w = r.Create("default", WidgetConfig{7});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)->size, 7);
  EXPECT_EQ(r.Create("sized", WidgetConfig{0}).status().message(), "size must be positive");
  EXPECT_EQ(r.Create("broken").status().code(), StatusCode::kInternal);
  auto unknown = r.Create("huge");
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(unknown.status().message(),
            "unknown widget 'huge'; known widgets: sized, broken, default");
  std::vector<std::string> names;
  for (const auto& e : r.List()) names.push_back(e.name + "/" + e.alias_of);
  EXPECT_EQ(names, (std::vector<std::string>{"sized/", "broken/", "default/sized"}));
  EXPECT_EQ(r.List().back().description, "alias of sized: takes the size");
}

// The names a registry lists, each created and checked to carry its name.
template <typename T>
std::vector<std::string> CreatedNames(const Registry<T>& r) {
  std::vector<std::string> names;
  for (const auto& e : r.List()) {
    names.push_back(e.name);
    auto made = r.Create(e.name);
    EXPECT_TRUE(made.ok()) << e.name;
    if (made.ok()) {
      EXPECT_EQ((*made)->name(), e.name);
    }
  }
  return names;
}

TEST(Registry, BuiltinGatesAndFiltersAreTheDefaultProfilesAndRefuseDuplicates) {
  EXPECT_EQ(CreatedNames(BuiltinGates()), DefaultGates());
  EXPECT_EQ(CreatedNames(BuiltinAdmissionFilters()), DefaultAdmissionFilters());
  GateRegistry mine = BuiltinGates();
  EXPECT_EQ(mine.Register("hold", "another hold",
                          [](const PluginConfig&) { return BuiltinGates().Create("hold").value(); })
                .code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(BuiltinAdmissionFilters().Create("health").status().message(),
            "unknown admission filter 'health'; known filters: drain, enforce-memory, env-compat");
}

}  // namespace
}  // namespace gpupool::sched
