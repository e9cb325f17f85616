#include "net/connection_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace gpupool::net {
namespace {

using Phase = ConnectionTable::Phase;
constexpr int64_t kSec = 1'000'000;

ConnectionLimits Limits() {
  ConnectionLimits l;
  l.max_connections = 40;
  l.reserved = 10;
  l.max_pending = 15;  // active ones: 40 - 10 - 15 = 15
  l.head_timeout_us = 10 * kSec;
  l.idle_timeout_us = 5 * kSec;
  l.transfer_floor_us = 10 * kSec;
  l.min_bytes_per_s = 1000;
  return l;
}

PeerCaps Caps(size_t pending, size_t active) {
  return {pending, active, "max-connections-per-uid"};
}

std::vector<ConnectionTable::Id> Ids(const std::vector<ConnectionTable::Close>& closes) {
  std::vector<ConnectionTable::Id> ids;
  for (const auto& c : closes) ids.push_back(c.id);
  return ids;
}

TEST(ConnectionTableTest, APeersPendingConnectionsPastItsCapCloseItsOldestNotOthers) {
  ConnectionTable t(Limits());
  std::vector<ConnectionTable::Close> close;
  ASSERT_TRUE(t.Open(100, "uid 2000", Caps(3, 10), false, 0, &close));
  for (ConnectionTable::Id id = 1; id <= 5; ++id) {
    ASSERT_TRUE(t.Open(id, "uid 1000", Caps(3, 10), false, static_cast<int64_t>(id), &close));
  }
  EXPECT_EQ(Ids(close), (std::vector<ConnectionTable::Id>{1, 2}));
  ASSERT_EQ(close.size(), 2U);
  EXPECT_EQ(close[0].phase, Phase::kHead);
  EXPECT_NE(close[0].why.find("too many connections from uid 1000"), std::string::npos)
      << close[0].why;
  EXPECT_EQ(t.pending_of("uid 1000"), 3U);
  EXPECT_EQ(t.pending_of("uid 2000"), 1U);
  EXPECT_EQ(t.phase_of(1), Phase::kClosing);  // until the server has closed it
  EXPECT_EQ(t.open(), 6U);
  t.Closed(1);
  t.Closed(2);
  EXPECT_EQ(t.open(), 4U);
  EXPECT_EQ(t.phase_of(1), std::nullopt);
}

TEST(ConnectionTableTest, PendingConnectionsPastTheServersCapCloseTheOldestOfAll) {
  ConnectionTable t(Limits());
  std::vector<ConnectionTable::Close> close;
  // 15 peers of one connection each (many addresses): the per-peer cap never bites.
  for (ConnectionTable::Id id = 1; id <= 15; ++id) {
    ASSERT_TRUE(t.Open(id, "10.0.0." + std::to_string(id), Caps(3, 10), false, 0, &close));
  }
  EXPECT_TRUE(close.empty());
  // A newcomer (an agent's connection, say) still gets in: the oldest makes room.
  ASSERT_TRUE(t.Open(16, "10.0.1.1", Caps(3, 10), false, 1, &close));
  EXPECT_EQ(Ids(close), (std::vector<ConnectionTable::Id>{1}));
  EXPECT_NE(close[0].why.find("the server had too many connections open without a request"),
            std::string::npos);
  EXPECT_EQ(t.pending(), 15U);
}

TEST(ConnectionTableTest, TheHeadDeadlineCountsFromAcceptWhateverArrives) {
  ConnectionTable t(Limits());
  std::vector<ConnectionTable::Close> close;
  ASSERT_TRUE(t.Open(1, "uid 1000", Caps(3, 10), false, 100, &close));
  ASSERT_TRUE(t.Open(2, "uid 1000", Caps(3, 10), false, 200, &close));
  EXPECT_EQ(t.NextDeadline(), 100 + 10 * kSec);
  EXPECT_TRUE(t.Expire(100 + 10 * kSec - 1).empty());
  const auto expired = t.Expire(100 + 10 * kSec);
  ASSERT_EQ(expired.size(), 1U);
  EXPECT_EQ(expired[0].id, 1U);
  EXPECT_EQ(expired[0].phase, Phase::kHead);
  EXPECT_TRUE(expired[0].why.empty());
  EXPECT_EQ(t.pending(), 1U);  // closing ones are out of their share
}

TEST(ConnectionTableTest, BodyAndAnswerDeadlinesGrowWithTheirSizeAndAHandlerHasNone) {
  ConnectionTable t(Limits());
  std::vector<ConnectionTable::Close> close;
  ASSERT_TRUE(t.Open(1, "uid 1000", Caps(3, 10), false, 0, &close));
  EXPECT_EQ(t.HeadArrived(1, ConnectionClass::kUser, 5000, kSec), "");
  EXPECT_EQ(t.phase_of(1), Phase::kBody);
  EXPECT_EQ(t.NextDeadline(), kSec + 10 * kSec + 5 * kSec);  // floor + 5000 B at 1000 B/s
  t.HandlerRunning(1);
  EXPECT_EQ(t.NextDeadline(), std::nullopt);
  EXPECT_TRUE(t.Expire(1000 * kSec).empty());
  t.Answering(1, 20'000, 1000 * kSec);
  EXPECT_EQ(t.NextDeadline(), 1000 * kSec + 10 * kSec + 20 * kSec);
  t.RequestDone(1, 1040 * kSec, &close);
  EXPECT_EQ(t.phase_of(1), Phase::kIdle);
  EXPECT_EQ(t.NextDeadline(), 1045 * kSec);
  EXPECT_EQ(t.pending_of("uid 1000"), 1U);  // between requests it is pending again
  EXPECT_EQ(t.active_of("uid 1000"), 0U);
  const auto expired = t.Expire(1045 * kSec);
  ASSERT_EQ(expired.size(), 1U);
  EXPECT_EQ(expired[0].phase, Phase::kIdle);
}

TEST(ConnectionTableTest, AKnownCallerPastItsActiveCapIsRefusedNamingTheCapAndOthersAreNot) {
  ConnectionTable t(Limits());
  std::vector<ConnectionTable::Close> close;
  for (ConnectionTable::Id id = 1; id <= 3; ++id) {
    ASSERT_TRUE(t.Open(id, "uid 1000", Caps(5, 2), false, 0, &close));
  }
  ASSERT_TRUE(t.Open(4, "uid 2000", Caps(5, 2), false, 0, &close));
  EXPECT_EQ(t.HeadArrived(1, ConnectionClass::kUser, 0, 0), "");
  EXPECT_EQ(t.HeadArrived(2, ConnectionClass::kUser, 0, 0), "");
  const std::string why = t.HeadArrived(3, ConnectionClass::kUser, 0, 0);
  EXPECT_NE(why.find("too many connections at once from uid 1000: 2 with a request under way"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("max-connections-per-uid"), std::string::npos) << why;
  EXPECT_EQ(t.HeadArrived(4, ConnectionClass::kUser, 0, 0), "");
  EXPECT_EQ(t.active_of("uid 1000"), 2U);
  EXPECT_EQ(t.pending_of("uid 1000"), 1U);  // the refused one, until it is closed
  EXPECT_TRUE(close.empty());
}

TEST(ConnectionTableTest, ActiveConnectionsInAllStopShortOfTheReservedShare) {
  ConnectionTable t(Limits());
  std::vector<ConnectionTable::Close> close;
  // 15 known callers from 15 addresses take every active connection there is.
  for (ConnectionTable::Id id = 1; id <= 15; ++id) {
    ASSERT_TRUE(t.Open(id, "10.0.0." + std::to_string(id), Caps(3, 10), false, 0, &close));
    ASSERT_EQ(t.HeadArrived(id, ConnectionClass::kUser, 0, 0), "");
  }
  ASSERT_TRUE(t.Open(16, "10.0.0.16", Caps(3, 10), false, 0, &close));
  EXPECT_NE(t.HeadArrived(16, ConnectionClass::kUser, 0, 0)
                .find("the server has too many connections with a request under way (15)"),
            std::string::npos);
  // An agent still gets in, and so do the reserved uids, up to every connection.
  ASSERT_TRUE(t.Open(17, "10.0.0.17", Caps(3, 10), false, 0, &close));
  EXPECT_EQ(t.HeadArrived(17, ConnectionClass::kReserved, 0, 0), "");
  EXPECT_EQ(t.reserved_in_use(), 1U);
  for (ConnectionTable::Id id = 18; id <= 40; ++id) {
    ASSERT_TRUE(t.Open(id, "uid 0", Caps(3, 10), true, 0, &close)) << id;
  }
  EXPECT_FALSE(t.Open(41, "uid 0", Caps(3, 10), true, 0, &close));
  EXPECT_TRUE(close.empty());
}

TEST(ConnectionTableTest, AnAgentsConnectionLeavesThePendingShareAndIsNotClosedForRoom) {
  ConnectionTable t(Limits());
  std::vector<ConnectionTable::Close> close;
  ASSERT_TRUE(t.Open(1, "10.0.0.1", Caps(3, 10), false, 0, &close));
  ASSERT_EQ(t.HeadArrived(1, ConnectionClass::kReserved, 0, 0), "");
  t.HandlerRunning(1);  // a long poll
  std::vector<ConnectionTable::Id> closed;
  for (ConnectionTable::Id id = 2; id <= 50; ++id) {
    ASSERT_TRUE(t.Open(id, "10.0.0.1", Caps(3, 10), false, 0, &close));
    for (const auto& c : close) t.Closed(c.id);  // as the server does, soon after
    for (ConnectionTable::Id c : Ids(close)) closed.push_back(c);
    close.clear();
  }
  EXPECT_EQ(closed.size(), 46U);
  EXPECT_EQ(std::count(closed.begin(), closed.end(), 1U), 0);
  EXPECT_EQ(t.phase_of(1), Phase::kHandler);
  EXPECT_EQ(t.pending_of("10.0.0.1"), 3U);
}

TEST(ConnectionTableTest, ConnectionsBeingClosedStillCountAgainstEveryConnection) {
  ConnectionLimits l = Limits();
  ConnectionTable t(l);
  std::vector<ConnectionTable::Close> close;
  // 200 from one peer: each past the third closes the oldest, whose descriptor is held
  // until the server has closed it; past 40 in all, new ones wait for those.
  int refused = 0;
  for (ConnectionTable::Id id = 1; id <= 200; ++id) {
    if (!t.Open(id, "10.0.0.1", Caps(3, 10), false, 0, &close)) ++refused;
  }
  EXPECT_EQ(t.open(), 40U);
  EXPECT_EQ(refused, 160);
  for (const auto& c : close) t.Closed(c.id);
  EXPECT_EQ(t.open(), 3U);
  EXPECT_TRUE(t.Open(201, "10.0.0.1", Caps(3, 10), false, 0, &close));
}

TEST(ConnectionTableTest, AnAnonymousRequestStaysPendingThroughItsBody) {
  ConnectionTable t(Limits());
  std::vector<ConnectionTable::Close> close;
  ASSERT_TRUE(t.Open(1, "10.0.0.1", Caps(2, 10), false, 0, &close));
  ASSERT_EQ(t.HeadArrived(1, ConnectionClass::kAnonymous, 1 << 20, 0), "");
  ASSERT_TRUE(t.Open(2, "10.0.0.1", Caps(2, 10), false, 1, &close));
  ASSERT_TRUE(t.Open(3, "10.0.0.1", Caps(2, 10), false, 2, &close));
  ASSERT_EQ(close.size(), 1U);
  EXPECT_EQ(close[0].id, 1U);  // the oldest, mid-body: no valid credentials
  EXPECT_EQ(close[0].phase, Phase::kBody);
}

TEST(ConnectionTableTest, AReservedUidKeepsItsShareBetweenRequestsAndHasNoPeerCap) {
  ConnectionTable t(Limits());
  std::vector<ConnectionTable::Close> close;
  for (ConnectionTable::Id id = 1; id <= 20; ++id) {
    ASSERT_TRUE(t.Open(id, "uid 0", Caps(1, 1), true, 0, &close));
  }
  EXPECT_EQ(t.HeadArrived(1, ConnectionClass::kUser, 0, 0), "");
  t.RequestDone(1, 0, &close);
  EXPECT_TRUE(close.empty());
  EXPECT_EQ(t.reserved_in_use(), 20U);
  EXPECT_EQ(t.pending(), 0U);
}

}  // namespace
}  // namespace gpupool::net
