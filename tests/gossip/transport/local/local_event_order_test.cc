// The LocalHub's ordered virtual time (event_order.h): a server takes the
// messages for it in the order they arrive in virtual time, whatever order
// their senders ran in; its answers leave at its own clock; a receive's wait
// returns only at its turn; a parked owner holds nobody back and a served
// message wakes it at that message's moment. Expected times in closed form.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "gossip/transport/local/local_transport.h"
#include "tests/gossip/transport/transport_test_util.h"

namespace chorus::gossip {
namespace {

constexpr double kOrderTol = 1e-12;
constexpr double kOrderLatency = 1e-3;  // alpha: 1 ms, infinite bandwidth
constexpr Tag kServedTag = 5;
constexpr Tag kAnswerTag = 6;

std::shared_ptr<LocalHub> OrderedTestHub(int n) {
  return testing::VirtualTimeHub(n, kOrderLatency, /*bytes_per_second=*/0, /*ordered=*/true);
}

Deadline OrderSoon() { return Deadline::AfterSeconds(20); }

TEST(LocalEventOrder, OnlyAnOrderedHubHasAnOrder) {
  EXPECT_EQ(testing::VirtualTimeHub(2, kOrderLatency, 0)->MakeAll()[0]->Order(), nullptr);
  EXPECT_NE(OrderedTestHub(2)->MakeAll()[0]->Order(), nullptr);
}

// Slot 0 sends at 5 ms, then slot 1 at 1 ms: slot 2's server takes slot 1's
// request first, answers it at its arrival (1 ms + alpha, not at slot 2's
// owner clock of 1 s), and only then slot 0's.
TEST(LocalEventOrder, TheServerTakesRequestsByVirtualArrivalAndAnswersAtItsOwnClock) {
  auto hub = OrderedTestHub(3);
  auto t = hub->MakeAll();
  t[2]->Order()->OpenServing(kServedTag);
  hub->AdvanceVirtual(2, 1.0);  // the server's owner computes far ahead
  std::vector<Rank> served;
  std::thread server([&] {
    EventOrder* order = t[2]->Order();
    order->ServeHere();
    for (int k = 0; k < 2; ++k) {
      Result<Rank> source = order->AwaitMessage(OrderSoon());
      ASSERT_TRUE(source) << source.error().ToString();
      std::vector<std::byte> in(4);
      ASSERT_TRUE(t[2]->Recv(*source, kServedTag, in, OrderSoon()));
      served.push_back(*source);
      ASSERT_TRUE(t[2]->Isend(*source, kAnswerTag, in));
    }
    // Waiting with nothing to serve holds nobody back, after its deadline too.
    EXPECT_FALSE(order->AwaitMessage(Deadline::AfterSeconds(0.01)));
  });
  std::vector<std::byte> request(4, std::byte{1});
  hub->AdvanceVirtual(0, 0.005);
  ASSERT_TRUE(t[0]->Isend(2, kServedTag, request));  // queued first in wall time
  hub->AdvanceVirtual(1, 0.001);
  ASSERT_TRUE(t[1]->Isend(2, kServedTag, request));
  std::vector<std::byte> answer(4);
  ASSERT_TRUE(t[1]->Recv(2, kAnswerTag, answer, OrderSoon()));
  EXPECT_NEAR(hub->VirtualNow(1), 0.001 + 2 * kOrderLatency, kOrderTol);
  hub->AdvanceVirtual(1, 1.0);  // computes on: slot 0's request is next
  auto second = t[0]->Recv(2, kAnswerTag, answer, OrderSoon());
  ASSERT_TRUE(second) << second.error().ToString();
  EXPECT_NEAR(hub->VirtualNow(0), 0.005 + 2 * kOrderLatency, kOrderTol);
  server.join();
  t[2]->Order()->CloseServing();
  EXPECT_EQ(served, (std::vector<Rank>{1, 0}));
  EXPECT_EQ(hub->VirtualNow(2), 1.0);  // the answers moved the server's clock only
}

// A receive whose message arrived at 2 ms waits while another owner is still
// at 1 ms (it could send something earlier), and returns once that one moves on.
TEST(LocalEventOrder, AReceiveWaitsForItsTurn) {
  auto hub = OrderedTestHub(3);
  auto t = hub->MakeAll();
  hub->AdvanceVirtual(0, 0.001);
  std::vector<std::byte> out(4), in(4);
  ASSERT_TRUE(t[0]->Isend(1, 1, out));          // arrives at 2 ms
  hub->AdvanceVirtual(0, 1.0);
  hub->AdvanceVirtual(2, 0.001);                 // slot 2 stands at 1 ms
  std::atomic<bool> received{false};
  std::thread receiver([&] {
    ASSERT_TRUE(t[1]->Recv(0, 1, in, OrderSoon()));
    received.store(true);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(received.load());
  hub->AdvanceVirtual(2, 1.0);
  receiver.join();
  EXPECT_TRUE(received.load());
  EXPECT_NEAR(hub->VirtualNow(1), 0.001 + kOrderLatency, kOrderTol);
}

// An owner parked at 0 s while its server takes a message arriving at
// 1 ms: the server does not wait for it, and WakeOwner moves it to 1 ms.
TEST(LocalEventOrder, AParkedOwnerHoldsNobodyBackAndWakesAtTheServedMoment) {
  auto hub = OrderedTestHub(2);
  auto t = hub->MakeAll();
  EventOrder* order = t[1]->Order();
  order->OpenServing(kServedTag);
  order->Park();
  std::thread server([&] {
    order->ServeHere();
    Result<Rank> source = order->AwaitMessage(OrderSoon());
    ASSERT_TRUE(source) << source.error().ToString();
    std::vector<std::byte> in(4);
    ASSERT_TRUE(t[1]->Recv(*source, kServedTag, in, OrderSoon()));
    order->WakeOwner();
  });
  std::vector<std::byte> notice(4);
  ASSERT_TRUE(t[0]->Isend(1, kServedTag, notice));  // arrives at 1 ms
  hub->AdvanceVirtual(0, 1.0);
  server.join();
  ASSERT_TRUE(order->Unpark(OrderSoon()).ok());
  order->CloseServing();
  EXPECT_NEAR(hub->VirtualNow(1), kOrderLatency, kOrderTol);
}

}  // namespace
}  // namespace chorus::gossip
