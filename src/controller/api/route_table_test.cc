#include "controller/api/route_table.h"

#include <gtest/gtest.h>

#include <set>

namespace gpupool::controller::api {
namespace {

std::string Name(const RouteMatch& m) {
  return m.route == nullptr ? "(none)"
                            : std::string(m.route->method) + " " + std::string(m.route->pattern);
}

TEST(RouteTableTest, EachRowIsOnceWithAHandlerAndAWayToBeCalled) {
  std::set<std::string> seen;
  for (const Route& r : Table()) {
    const std::string row = std::string(r.method) + " " + std::string(r.pattern);
    EXPECT_TRUE(seen.insert(row).second) << row << " is twice";
    EXPECT_NE(r.handler, nullptr) << row;
    EXPECT_TRUE(r.access.anyone || r.access.callers != 0) << row << ": nobody may call it";
    EXPECT_FALSE(r.access.anyone && r.access.callers != 0) << row << ": public and not";
    // A caller left out hears why, unless only node or metrics tokens are (they hear what
    // their kind may call instead).
    if (!r.access.anyone && (r.access.callers & kPeopleBits) != kPeopleBits) {
      EXPECT_FALSE(r.access.refusal.empty()) << row;
    }
    // Only a submission is read to decide whether it blocks.
    EXPECT_EQ(r.blocking == Blocking::kWhenInspecting, row == "POST /v1/jobs") << row;
  }
}

TEST(RouteTableTest, TheMostSpecificPatternWinsThenTheMethod) {
  EXPECT_EQ(Name(Find("POST", "/v1/environments/check")), "POST /v1/environments/check");
  EXPECT_EQ(Name(Find("GET", "/v1/environments/team/torch:1")), "GET /v1/environments/{ref...}");
  // "check" is no environment's name: the literal route is the more specific, and GET
  // on it is another method on a known path.
  RouteMatch m = Find("GET", "/v1/environments/check");
  EXPECT_EQ(m.route, nullptr);
  EXPECT_TRUE(m.path_known);
  m = Find("GET", "/v1/jobs/12_3/logs");  // ARRAY_INDEX
  EXPECT_EQ(Name(m), "GET /v1/jobs/{id}/logs");
  EXPECT_EQ(m.params.id, 12);
  EXPECT_EQ(m.params.element, 3);
  EXPECT_EQ(Find("GET", "/v1/exec/12_3").route, nullptr);  // only jobs have elements
  EXPECT_EQ(Find("GET", "/v1/jobs/0").route, nullptr);
  EXPECT_FALSE(Find("GET", "/v1/jobs/abc").path_known);
  m = Find("DELETE", "/v1/tokens/0123456789ab");
  EXPECT_EQ(m.params.named.size(), 1u);
  EXPECT_EQ(m.params.named[0].second, "0123456789ab");
}

TEST(RouteTableTest, DocumentedPatternsLoseTheRestMarker) {
  EXPECT_EQ(DocumentedPattern("/v1/environments/{ref...}"), "/v1/environments/{ref}");
  EXPECT_EQ(DocumentedPattern("/v1/jobs/{id}"), "/v1/jobs/{id}");
}

// A request no row answers is judged by its nearest rows: callers of its resource may
// hear 404 or 400, others 403 with the resource's refusal; metrics tokens never.
TEST(RouteTableTest, AnUnroutedRequestIsJudgedByItsNearestRows) {
  struct Case {
    const char* method;
    const char* path;
    uint8_t callers;
    const char* refusal;
  };
  for (const Case& c : std::vector<Case>{
           {"GET", "/v1/nodes/vm", kAdminBit, "only admins drain and resume nodes"},
           {"GET", "/v1/nodes/", kAdminBit, "only admins drain and resume nodes"},
           {"POST", "/v1/nodes/vm/reboot", kAdminBit, "only admins drain and resume nodes"},
           {"POST", "/v1/nodes", kPeopleBits, ""},  // GET /v1/nodes's, less metrics tokens
           {"PUT", "/v1/tokens", kAdminBit, "only admins manage tokens"},
           {"GET", "/v1/tokens/0123456789ab", kAdminBit, "only admins manage tokens"},
           {"POST", "/v1/limits", kPeopleBits, "only admins set limits"},
           {"GET", "/v1/agent/nope", kAgentBits, ""},
           {"PUT", "/v1/agent/work", kAgentBits, ""},
           {"GET", "/v1/agentx", kPeopleBits, ""},  // whole segments only
           {"GET", "/v1/nope", kPeopleBits, ""},
           {"GET", "/nope", kPeopleBits, ""},
           {"POST", "/healthz", kPeopleBits, ""},  // a public row counts as people's
           {"GET", "/v1/usage/x", kPeopleBits, ""},
           {"GET", "/v1/jobs/abc", kPeopleBits, ""},
       }) {
    const RouteMatch m = Find(c.method, c.path);
    ASSERT_EQ(m.route, nullptr) << c.method << " " << c.path;
    const Access a = AccessOf(c.method, c.path);
    EXPECT_FALSE(a.anyone) << c.method << " " << c.path;
    EXPECT_FALSE(a.session) << c.method << " " << c.path;
    EXPECT_EQ(a.callers, c.callers) << c.method << " " << c.path;
    if (*c.refusal != '\0' || c.callers == kAdminBit) {
      EXPECT_EQ(a.refusal, c.refusal) << c.method << " " << c.path;
    }
  }
  EXPECT_NE(AccessOf("GET", "/v1/agent/nope").refusal.find("use a node token"),
            std::string_view::npos);
}

}  // namespace
}  // namespace gpupool::controller::api
