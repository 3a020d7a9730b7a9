/* test_ratelimit.c - token buckets under a synthetic clock. */
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "proxai/ratelimit.h"

#define CHECK_EQ(a, b)                                                                  \
  do {                                                                                  \
    unsigned long long a_ = (a), b_ = (b);                                              \
    if (a_ != b_) {                                                                     \
      fprintf(stderr, "%s:%d: %s == %llu, expected %llu\n", __FILE__, __LINE__, #a, a_, \
              b_);                                                                      \
      failures++;                                                                       \
    }                                                                                   \
  } while (0)

static void test_unlimited(void) {
  for (int i = 0; i < 100000; i++) CHECK_EQ(px_rl_admit("open", 0, 0, 1000), 0);
  /* Charging an unlimited tpm has no effect either. */
  px_rl_charge("open", 0, 1000000, 1000);
  CHECK_EQ(px_rl_admit("open", 0, 0, 1000), 0);
  /* tpm unlimited but rpm limited: only rpm counts. */
  px_rl_charge("r", 0, 1000000, 0);
  CHECK_EQ(px_rl_admit("r", 1, 0, 0), 0);
  CHECK(px_rl_admit("r", 1, 0, 0) > 0);
  px_rl_reset();
}

static void test_rpm_burst_refill(void) {
  uint64_t t = 5000;
  /* A new bucket starts full: a burst of rpm requests passes at once. */
  for (int i = 0; i < 60; i++) CHECK_EQ(px_rl_admit("a", 60, 0, t), 0);
  /* The 61st is refused; one token per second comes back at 60 rpm. */
  CHECK_EQ(px_rl_admit("a", 60, 0, t), 1);
  /* Refused requests consume nothing. */
  CHECK_EQ(px_rl_admit("a", 60, 0, t), 1);
  /* 999 ms later still less than one token. */
  CHECK_EQ(px_rl_admit("a", 60, 0, t + 999), 1);
  CHECK_EQ(px_rl_admit("a", 60, 0, t + 1000), 0);
  CHECK_EQ(px_rl_admit("a", 60, 0, t + 1000), 1);
  /* Keys are independent. */
  CHECK_EQ(px_rl_admit("b", 60, 0, t + 1000), 0);
  /* A long idle period refills to capacity, not beyond. */
  t += 3600 * 1000;
  for (int i = 0; i < 60; i++) CHECK_EQ(px_rl_admit("a", 60, 0, t), 0);
  CHECK(px_rl_admit("a", 60, 0, t) > 0);

  /* Slow refill: 1 rpm -> retry-after 60 s, counting down. */
  CHECK_EQ(px_rl_admit("slow", 1, 0, 0), 0);
  CHECK_EQ(px_rl_admit("slow", 1, 0, 0), 60);
  CHECK_EQ(px_rl_admit("slow", 1, 0, 30000), 30);
  CHECK_EQ(px_rl_admit("slow", 1, 0, 59001), 1);
  CHECK_EQ(px_rl_admit("slow", 1, 0, 60000), 0);

  /* Fractional refill accumulates exactly: 7 rpm, tokens every 60000/7 ms. */
  for (int i = 0; i < 7; i++) CHECK_EQ(px_rl_admit("frac", 7, 0, 0), 0);
  CHECK(px_rl_admit("frac", 7, 0, 8571) > 0);   /* 8571*7 < 60000 */
  CHECK_EQ(px_rl_admit("frac", 7, 0, 8572), 0); /* 8572*7 >= 60000 */
  px_rl_reset();
}

static void test_rpm_reload(void) {
  for (int i = 0; i < 10; i++) CHECK_EQ(px_rl_admit("k", 100, 0, 0), 0);
  /* Limit lowered to 5: the level (90) is clipped to the new capacity. */
  for (int i = 0; i < 5; i++) CHECK_EQ(px_rl_admit("k", 5, 0, 0), 0);
  CHECK(px_rl_admit("k", 5, 0, 0) > 0);
  px_rl_reset();
  /* After reset the bucket is new again (full). */
  CHECK_EQ(px_rl_admit("k", 1, 0, 0), 0);
  px_rl_reset();
}

static void test_tpm_debt(void) {
  uint64_t t = 0;
  /* 600 tpm = 10 tokens per second. */
  CHECK_EQ(px_rl_admit("k", 0, 600, t), 0);
  px_rl_charge("k", 600, 500, t); /* level 100 */
  CHECK_EQ(px_rl_admit("k", 0, 600, t), 0);
  px_rl_charge("k", 600, 400, t); /* level -300: 30 s of debt */
  CHECK_EQ(px_rl_admit("k", 0, 600, t), 30);
  CHECK_EQ(px_rl_admit("k", 0, 600, t + 10000), 20);
  /* 1 ms before the debt is paid: still refused, rounded up to 1 s. */
  CHECK_EQ(px_rl_admit("k", 0, 600, t + 29999), 1);
  CHECK_EQ(px_rl_admit("k", 0, 600, t + 30000), 0);
  /* A charge larger than the whole capacity is a long debt. */
  px_rl_charge("k", 600, 6000, t + 30000);
  CHECK_EQ(px_rl_admit("k", 0, 600, t + 30000), 600);
  /* While refused by tpm, rpm tokens are not consumed. */
  CHECK_EQ(px_rl_admit("both", 2, 60, 0), 0);
  px_rl_charge("both", 60, 120, 0); /* level -60 tokens: 60 s */
  CHECK_EQ(px_rl_admit("both", 2, 60, 0), 60);
  CHECK_EQ(px_rl_admit("both", 2, 60, 0), 60);
  CHECK_EQ(px_rl_admit("both", 2, 60, 60000), 0); /* rpm: 1 left + refill */
  CHECK_EQ(px_rl_admit("both", 2, 60, 60000), 0);
  CHECK(px_rl_admit("both", 2, 60, 60000) > 0);
  /* Huge charges do not overflow into credit. */
  px_rl_charge("huge", 1000, UINT64_MAX / 2, 0);
  px_rl_charge("huge", 1000, UINT64_MAX / 2, 0);
  CHECK(px_rl_admit("huge", 0, 1000, 0) > 0);
  CHECK(px_rl_admit("huge", 0, 1000, 3600 * 1000) > 0);
  px_rl_reset();
}

int main(void) {
  test_unlimited();
  test_rpm_burst_refill();
  test_rpm_reload();
  test_tpm_debt();
  return check_report("test_ratelimit");
}
