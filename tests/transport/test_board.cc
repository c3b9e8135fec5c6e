// test_board.cc — the board's rounds (src/transport/board.h) between threads, as
// the processes of one node use it through shared memory: every rank reads every
// rank's record of each round, never one of another round, while ranks run ahead
// and behind and the two slots are reused; records of every size up to the
// largest, posted from every offset from a 32-byte boundary, each read as far off
// a boundary as it was posted from. Under TSan this also checks that the round
// number's release and acquire order the records' bytes.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "transport/board.h"
}

namespace {

unsigned char Pattern(int rank, uint64_t round, size_t j) {
  return static_cast<unsigned char>(rank * 31 + round * 7 + j);
}

// Record sizes cycle through these, so that a slot is reused with a size it did
// not have; the largest is among them.
const size_t kSizes[] = {0, 1, 4, 31, 32, 33, 64, 1000, 4096, TP_BOARD_MAX_BYTES};
const int kNumSizes = sizeof kSizes / sizeof kSizes[0];

size_t SizeOf(int rank, uint64_t round) {
  return kSizes[(round + static_cast<uint64_t>(rank)) % kNumSizes];
}

// The first address in v at a multiple of `align` (v holds `align` bytes to spare).
unsigned char* AlignedIn(std::vector<unsigned char>* v, size_t align) {
  return v->data() + (align - reinterpret_cast<uintptr_t>(v->data()) % align) % align;
}

// A board's memory: zero-filled, as a new shared object, and on a line as a
// mapping is (board_init requires it).
unsigned char* BoardMemory(std::vector<unsigned char>* mem, int nranks) {
  mem->assign(board_bytes(nranks) + 64, 0);
  return AlignedIn(mem, 64);
}

// Where rank r posts round n's record from: this many bytes past a 32-byte
// boundary; 0 to 31, and a coprime step so that every size meets every offset.
size_t OffsetOf(int rank, uint64_t round) {
  return (round * 3 + static_cast<uint64_t>(rank) * 5) % 32;
}

// What rank `me` finds wrong in round n's records, or "".
std::string CheckRound(const struct board* b, int me, uint64_t n) {
  for (int r = 0; r < b->nranks; r++) {
    const struct tp_post& p = b->posts[r];
    std::string who =
        "rank " + std::to_string(me) + ", round " + std::to_string(n) + ", rank " + std::to_string(r) + "'s record: ";
    if (p.hash != n * 1000 + static_cast<uint64_t>(r)) return who + "hash " + std::to_string(p.hash);
    if (p.bytes != SizeOf(r, n)) return who + std::to_string(p.bytes) + " bytes";
    if (reinterpret_cast<uintptr_t>(p.data) % 32 != OffsetOf(r, n))
      return who + "read " + std::to_string(reinterpret_cast<uintptr_t>(p.data) % 32) + " bytes past a boundary";
    const unsigned char* d = static_cast<const unsigned char*>(p.data);
    for (size_t j = 0; j < p.bytes; j++)
      if (d[j] != Pattern(r, n, j)) return who + "byte " + std::to_string(j) + " differs";
  }
  return "";
}

// `rounds` rounds on `nranks` threads over one board. Rank r's record of round n:
// hash n * 1000 + r, SizeOf(r, n) bytes of Pattern(r, n, .). Every thread waits
// for each rank's record by spinning on board_arrived, yielding every so often
// (more ranks than cores), and checks what it read; odd ranks also yield after
// each round, so that ranks drift apart. Returns the first error.
std::string RunRounds(int nranks, int rounds) {
  std::vector<unsigned char> mem;
  unsigned char* at = BoardMemory(&mem, nranks);
  std::vector<struct board> boards(nranks);
  for (int r = 0; r < nranks; r++)
    if (board_init(&boards[r], at, r, nranks) != gcclSuccess) return "board_init failed";
  std::vector<std::string> errors(nranks);
  std::vector<std::thread> threads;
  for (int me = 0; me < nranks; me++)
    threads.emplace_back([&, me] {
      struct board* b = &boards[me];
      std::vector<unsigned char> buf(TP_BOARD_MAX_BYTES + 64);
      unsigned char* aligned = AlignedIn(&buf, 32);
      for (uint64_t n = 1; n <= static_cast<uint64_t>(rounds) && errors[me].empty(); n++) {
        size_t bytes = SizeOf(me, n);
        unsigned char* data = aligned + OffsetOf(me, n);
        for (size_t j = 0; j < bytes; j++) data[j] = Pattern(me, n, j);
        board_publish(b, n * 1000 + static_cast<uint64_t>(me), data, bytes);
        if (b->round != n) errors[me] = "the board's round is " + std::to_string(b->round);
        for (int r = 0; r < nranks; r++)
          for (unsigned spins = 1; !board_arrived(b, r); spins++)
            if (spins % 64 == 0) std::this_thread::yield();
        if (errors[me].empty()) errors[me] = CheckRound(b, me, n);
        if (me % 2) std::this_thread::yield();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < nranks; r++) board_fini(&boards[r]);
  for (auto& e : errors)
    if (!e.empty()) return e;
  return "";
}

TEST(Board, OneRankReadsItsOwnRecords) {
  EXPECT_EQ(RunRounds(1, 50), "");
}

TEST(Board, EveryRankReadsEveryRecordOfEachRound) {
  for (int nranks : {2, 3, 5, 8}) EXPECT_EQ(RunRounds(nranks, 300), "") << nranks << " ranks";
}

TEST(Board, ARecordOfTheLastRoundIsNotTakenForThisOne) {
  // Two ranks on two slots: rank 1 posts round 1, then round 2 before rank 0
  // posts round 2; rank 0, in round 2, must not take rank 1's round-1 slot
  // (the other slot) nor see its round-2 record as round 3's.
  std::vector<unsigned char> mem;
  unsigned char* at = BoardMemory(&mem, 2);
  struct board a, b;
  ASSERT_EQ(board_init(&a, at, 0, 2), gcclSuccess);
  ASSERT_EQ(board_init(&b, at, 1, 2), gcclSuccess);
  board_publish(&a, 10, nullptr, 0);
  EXPECT_FALSE(board_arrived(&a, 1));
  board_publish(&b, 11, nullptr, 0);
  ASSERT_TRUE(board_arrived(&a, 1));
  EXPECT_EQ(a.posts[1].hash, 11u);
  ASSERT_TRUE(board_arrived(&b, 0));
  board_publish(&b, 21, nullptr, 0);  // rank 1 runs ahead into round 2
  board_publish(&a, 20, nullptr, 0);
  ASSERT_TRUE(board_arrived(&a, 1));
  EXPECT_EQ(a.posts[1].hash, 21u);
  board_publish(&a, 30, nullptr, 0);  // round 3: rank 1 has not posted it
  EXPECT_FALSE(board_arrived(&a, 1));
  board_fini(&a);
  board_fini(&b);
}

TEST(Board, MemoryOffALineIsRefused) {
  std::vector<unsigned char> mem;
  unsigned char* at = BoardMemory(&mem, 2);
  struct board b;
  EXPECT_EQ(board_init(&b, at + 32, 0, 2), gcclInternalError);
  ASSERT_EQ(board_init(&b, at, 0, 2), gcclSuccess);
  board_fini(&b);
}

}  // namespace
