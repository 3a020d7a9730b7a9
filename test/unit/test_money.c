/* test_money.c - costs in nano-USD (money.h), amounts in the configuration
 * and back (px_parse_usd / px_usd_str), budget windows, and the [price],
 * [team] and key budget configuration with its --check warnings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "proxai/config.h"
#include "proxai/money.h"

static void test_usd(void) {
  int64_t n = -1;
  CHECK(px_parse_usd("2.50", PX_PRICE_MAX_USD, &n) == 0 && n == 2500000000LL);
  CHECK(px_parse_usd("0.000000001", 10, &n) == 0 && n == 1);
  CHECK(px_parse_usd("500", PX_BUDGET_MAX_USD, &n) == 0 && n == 500000000000LL);
  CHECK(px_parse_usd(".5", 10, &n) == 0 && n == 500000000LL);
  CHECK(px_parse_usd("1000000000", PX_BUDGET_MAX_USD, &n) == 0);
  /* refused: sign, exponent, too many decimals, above the cap, junk */
  static const char *const bad[] = {"-1",           "+1",     "1e3",  "0.0000000001",
                                    "1000000000.5", "2.",     "",     ".",
                                    "1,5",          "12 USD", "0x10", "nan"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    CHECK(px_parse_usd(bad[i], PX_BUDGET_MAX_USD, &n) < 0);
  CHECK(px_parse_usd("1000001", PX_PRICE_MAX_USD, &n) < 0);
  char b[32];
  CHECK(strcmp(px_usd_str(0, b, sizeof(b)), "0") == 0);
  CHECK(strcmp(px_usd_str(1, b, sizeof(b)), "0.000000001") == 0);
  CHECK(strcmp(px_usd_str(42500, b, sizeof(b)), "0.0000425") == 0);
  CHECK(strcmp(px_usd_str(12500000000LL, b, sizeof(b)), "12.5") == 0);
  CHECK(strcmp(px_usd_str(-1500000000LL, b, sizeof(b)), "-1.5") == 0);
}

static void test_cost(void) {
  px_price_conf_t p = {.input = 2500000000LL,
                       .output = 10000000000LL,
                       .cache_read = 1250000000LL,
                       .cache_write = 3125000000LL};
  px_usage_t u = {5, 3, -1, -1, -1};
  CHECK(px_cost(&p, &u) == 42500); /* 5 x 2.50 + 3 x 10, per million */
  /* the whole prompt is input_tokens; cache reads and writes are parts of it */
  u = (px_usage_t){2400, 50, 2000, 300, 20};
  CHECK(px_cost(&p, &u) == 100 * 2500 + 2000 * 1250 + 300 * 3125 + 50 * 10000);
  /* unknown counts cost nothing; a count above the prompt is clipped */
  u = (px_usage_t){-1, -1, -1, -1, -1};
  CHECK(px_cost(&p, &u) == 0);
  u = (px_usage_t){10, 0, 50, 0, 0};
  CHECK(px_cost(&p, &u) == 10 * 1250);
  /* no drift: a million requests of 0.0000425 add to exactly 42.5 USD */
  int64_t sum = 0;
  u = (px_usage_t){5, 3, -1, -1, -1};
  for (int i = 0; i < 1000000; i++) sum += px_cost(&p, &u);
  CHECK(sum == 42500000000LL);
  /* sub-nano prices round to the nearest nano-dollar, bounds round up */
  px_price_conf_t tiny = {.input = 1, .output = 1, .cache_read = 1, .cache_write = 1};
  u = (px_usage_t){400000, 0, -1, -1, -1};
  CHECK(px_cost(&tiny, &u) == 0);
  CHECK(px_cost_bound(&tiny, 400000, 0) == 1);
  /* the bound: input at the dearest input price, output at output */
  CHECK(px_cost_bound(&p, 100, 10) ==
        (100 * 3125000000LL + 10 * 10000000000LL) / 1000000);
  /* absurd counts saturate instead of wrapping */
  px_price_conf_t dear = {.input = PX_PRICE_MAX_USD * PX_NANO_PER_USD,
                          .output = PX_PRICE_MAX_USD * PX_NANO_PER_USD};
  CHECK(px_cost_bound(&dear, UINT64_MAX / 2, UINT64_MAX / 2) == INT64_MAX);
}

static void test_windows(void) {
  px_win_t w;
  time_t t = 1795780214; /* 2026-11-27T08:30:14Z */
  px_window_at(PX_WINDOW_DAY, t, &w);
  CHECK(strcmp(w.label, "2026-11-27") == 0);
  char b[40];
  CHECK(strcmp(px_rfc3339(w.resets_at, b, sizeof(b)), "2026-11-28T00:00:00Z") == 0);
  uint32_t day = w.id;
  px_window_at(PX_WINDOW_MONTH, t, &w);
  CHECK(strcmp(w.label, "2026-11") == 0 && w.id != day);
  CHECK(strcmp(px_rfc3339(w.resets_at, b, sizeof(b)), "2026-12-01T00:00:00Z") == 0);
  px_window_at(PX_WINDOW_MONTH, 1798761599, &w); /* 2026-12-31T23:59:59Z */
  CHECK(strcmp(w.label, "2026-12") == 0);
  CHECK(strcmp(px_rfc3339(w.resets_at, b, sizeof(b)), "2027-01-01T00:00:00Z") == 0);
  px_window_at(PX_WINDOW_TOTAL, t, &w);
  CHECK(strcmp(w.label, "total") == 0 && w.resets_at == 0 && w.id != 0);
}

static void test_config(void) {
  char err[512];
  px_config_t *c = px_config_parse(
      "[upstream u]\nprotocol = openai_chat_completions\nbase_url = http://x/v1\n"
      "[route gpt-4o]\nupstream = u\n"
      "[route cheap]\nupstream = u\nmodel = mini-1\n"
      "[price gpt-4o*]\ninput = 2.50\noutput = 10\ncache_read = 1.25\n"
      "[team plat]\nbudget = 500\nbudget_window = month\n"
      "[key a]\nsecret = s\nteam = plat\nbudget = 50\nbudget_window = day\n"
      "[admin]\ntoken = t0k\n",
      "t.conf", err, sizeof(err));
  CHECK(c != NULL);
  if (c) {
    const px_price_conf_t *p = px_config_price(c, "gpt-4o-mini");
    CHECK(p && p->input == 2500000000LL && p->cache_read == 1250000000LL &&
          p->cache_write == 2500000000LL); /* cache_write defaults to input */
    CHECK(px_config_price(c, "claude") == NULL);
    CHECK(c->keys[0].team == px_config_team(c, "plat") &&
          c->keys[0].budget == 50000000000LL && c->keys[0].window == PX_WINDOW_DAY);
    CHECK(px_config_keyed(c));
    /* --check: mini-1 has no price; no store for the spend; no admin_listen */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    size_t n = px_config_warn(c, f);
    fclose(f);
    CHECK(n == 3);
    CHECK(buf &&
          strstr(buf, "[route cheap] sends model 'mini-1', which no [price] matches"));
    CHECK(buf && strstr(buf, "budgets without a persistent store"));
    CHECK(buf && strstr(buf, "admin_listen"));
    free(buf);
    px_config_unref(c);
  }
  static const struct {
    const char *text, *want;
  } bad[] = {
      {"[key a]\nsecret = s\nteam = nope\n", "t.conf:1: unknown team 'nope' in [key a]"},
      {"[key a]\nsecret = s\nbudget = -5\n", "t.conf:3: budget must be an amount in USD"},
      {"[team t]\nbudget = 1e9\n", "t.conf:2: budget must be an amount in USD"},
      {"[team t]\nbudget_window = week\n", "t.conf:2: budget_window must be day, month"},
      {"[price x]\noutput = 1\n", "t.conf:1: missing 'input' in [price x]"},
      {"[price x]\ninput = 1\noutput = 2\n[price x]\n",
       "t.conf:4: duplicate section [price x]"},
      {"[team a]\n[team a]\n", "t.conf:2: duplicate section [team a]"},
      {"[admin]\n", "t.conf:1: missing 'token' in [admin]"},
      {"[admin x]\ntoken = a\n", "t.conf:1: [admin] takes no name"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    c = px_config_parse(bad[i].text, "t.conf", err, sizeof(err));
    CHECK(c == NULL);
    if (strncmp(err, bad[i].want, strlen(bad[i].want)) != 0)
      fprintf(stderr, "got: %s\nwant: %s\n", err, bad[i].want), failures++;
    px_config_unref(c);
  }
}

int main(void) {
  test_usd();
  test_cost();
  test_windows();
  test_config();
  return check_report("money");
}
