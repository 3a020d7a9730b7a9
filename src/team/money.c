/* money.c - request costs and budget windows (money.h). */
#include "proxai/money.h"

#include <stdio.h>

#define TOKENS_PER_PRICE 1000000 /* prices are per million tokens */

static uint64_t known(int64_t n) {
  return n > 0 ? (uint64_t)n : 0;
}

static int64_t to_nano(unsigned __int128 sum) {
  unsigned __int128 r = (sum + TOKENS_PER_PRICE / 2) / TOKENS_PER_PRICE;
  return r > (unsigned __int128)INT64_MAX ? INT64_MAX : (int64_t)r;
}

int64_t px_cost(const px_price_conf_t *p, const px_usage_t *u) {
  uint64_t in = known(u->input_tokens), cr = known(u->cache_read_tokens),
           cw = known(u->cache_creation_tokens), out = known(u->output_tokens);
  /* input_tokens is the whole prompt, cache reads and writes included
   * (proto.h's usage convention) */
  if (cr > in) cr = in;
  if (cw > in - cr) cw = in - cr;
  uint64_t plain = in - cr - cw;
  unsigned __int128 sum = (unsigned __int128)plain * (uint64_t)p->input +
                          (unsigned __int128)cr * (uint64_t)p->cache_read +
                          (unsigned __int128)cw * (uint64_t)p->cache_write +
                          (unsigned __int128)out * (uint64_t)p->output;
  return to_nano(sum);
}

int64_t px_cost_bound(const px_price_conf_t *p, uint64_t input_tokens,
                      uint64_t output_tokens) {
  int64_t top = p->input;
  if (p->cache_read > top) top = p->cache_read;
  if (p->cache_write > top) top = p->cache_write;
  unsigned __int128 sum = (unsigned __int128)input_tokens * (uint64_t)top +
                          (unsigned __int128)output_tokens * (uint64_t)p->output;
  /* rounded up: a bound must not fall short by the rounding */
  unsigned __int128 r = (sum + TOKENS_PER_PRICE - 1) / TOKENS_PER_PRICE;
  return r > (unsigned __int128)INT64_MAX ? INT64_MAX : (int64_t)r;
}

static void window_at(px_window_t w, time_t now, px_win_t *out, int64_t *start);

/* The last window of each kind asked for, with its start: a request reads
 * its windows at admission and at settlement, and they rarely change. */
static struct {
  px_win_t win;
  int64_t start;
  int set;
} memo[3];

void px_window_at(px_window_t w, time_t now, px_win_t *out) {
  unsigned k = (unsigned)w < 3 ? (unsigned)w : 0;
  if (memo[k].set && now >= memo[k].start &&
      (memo[k].win.resets_at == 0 || now < memo[k].win.resets_at)) {
    *out = memo[k].win;
    return;
  }
  window_at((px_window_t)k, now, &memo[k].win, &memo[k].start);
  memo[k].set = 1;
  *out = memo[k].win;
}

static void window_at(px_window_t w, time_t now, px_win_t *out, int64_t *start) {
  struct tm tm;
  gmtime_r(&now, &tm);
  int y = tm.tm_year + 1900, m = tm.tm_mon; /* m: 0-11 */
  if (w == PX_WINDOW_TOTAL) {
    out->id = 3u << 28;
    snprintf(out->label, sizeof(out->label), "total");
    out->resets_at = 0;
    *start = INT64_MIN;
  } else if (w == PX_WINDOW_DAY) {
    out->id = 2u << 28 | (uint32_t)(now / 86400);
    snprintf(out->label, sizeof(out->label), "%04d-%02d-%02d", y, m + 1, tm.tm_mday);
    out->resets_at = (int64_t)(now / 86400 + 1) * 86400;
    *start = out->resets_at - 86400;
  } else {
    out->id = 1u << 28 | (uint32_t)(y * 12 + m);
    snprintf(out->label, sizeof(out->label), "%04d-%02d", y, m + 1);
    struct tm next = {0};
    next.tm_year = (m == 11 ? y + 1 : y) - 1900;
    next.tm_mon = (m + 1) % 12;
    next.tm_mday = 1;
    out->resets_at = (int64_t)timegm(&next);
    struct tm first = {0};
    first.tm_year = y - 1900;
    first.tm_mon = m;
    first.tm_mday = 1;
    *start = (int64_t)timegm(&first);
  }
}

const char *px_rfc3339(int64_t t, char *buf, size_t len) {
  time_t tt = (time_t)t;
  struct tm tm;
  gmtime_r(&tt, &tm);
  strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}
