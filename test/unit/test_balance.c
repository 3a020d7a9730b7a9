/* test_balance.c - deployment choice and passive health under a synthetic
 * clock, and the route keys that configure them (SPEC sections 3, 7). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "proxai/balance.h"
#include "proxai/config.h"
#include "proxai/metrics.h"

#define CHECK_EQ(a, b)                                                                  \
  do {                                                                                  \
    unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b);      \
    if (a_ != b_) {                                                                     \
      fprintf(stderr, "%s:%d: %s == %llu, expected %llu\n", __FILE__, __LINE__, #a, a_, \
              b_);                                                                      \
      failures++;                                                                       \
    }                                                                                   \
  } while (0)

#define UP(name, extra)                     \
  "[upstream " name                         \
  "]\nprotocol = openai_chat_completions\n" \
  "base_url = http://127.0.0.1:1/v1\n" extra

static px_config_t *parse(const char *text) {
  char err[512];
  px_config_t *c = px_config_parse(text, "t.conf", err, sizeof err);
  if (c == NULL) {
    fprintf(stderr, "unexpected config error: %s\n", err);
    failures++;
  }
  return c;
}

static void expect_err(const char *text, const char *want) {
  char err[512] = "";
  px_config_t *c = px_config_parse(text, "t.conf", err, sizeof err);
  CHECK(c == NULL);
  if (strstr(err, want) == NULL) {
    fprintf(stderr, "error '%s' lacks '%s'\n", err, want);
    failures++;
  }
  px_config_unref(c);
}

static px_bal_up_t *bal(const px_config_t *c, const char *name) {
  for (size_t i = 0; i < c->nupstreams; i++)
    if (strcmp(c->upstreams[i].name, name) == 0) return px_balance_up(&c->upstreams[i]);
  return NULL;
}

static const px_upstream_conf_t *upc(const px_config_t *c, const char *name) {
  for (size_t i = 0; i < c->nupstreams; i++)
    if (strcmp(c->upstreams[i].name, name) == 0) return &c->upstreams[i];
  return NULL;
}

static void test_config_keys(void) {
  px_config_t *c = parse(UP("a", "") UP("b", "weight = 3\nretry_after_max = 2s\n"
                                              "eject_after = 0\neject_for = 500ms\n")
                         "[upstream an]\nprotocol = anthropic_messages\n"
                         "base_url = http://127.0.0.1:1\n"
                         "[route gpt-*]\nupstream = a, b/model-b\nbalance = weighted\n"
                         "fallback = an/claude-x\nfallback = a/cheap\n"
                         "models = gpt-4o, gpt-4o-mini\n"
                         "[route x]\nupstream = b\n");
  if (c == NULL) return;
  const px_route_conf_t *r = &c->routes[0];
  CHECK_EQ(r->ndeployments, 2);
  CHECK_EQ(r->upstream, 0);
  CHECK(r->deployments[0].upstream == 0 && r->deployments[0].model == NULL);
  CHECK(r->deployments[1].upstream == 1 &&
        strcmp(r->deployments[1].model, "model-b") == 0);
  CHECK(r->balance == PX_BALANCE_WEIGHTED);
  CHECK_EQ(r->nfallbacks, 2);
  CHECK(r->fallbacks[0].upstream == 2 && strcmp(r->fallbacks[0].model, "claude-x") == 0);
  /* the same upstream as a deployment, with another model, is a fallback */
  CHECK(r->fallbacks[1].upstream == 0 && strcmp(r->fallbacks[1].model, "cheap") == 0);
  CHECK_EQ(r->nmodels, 2);
  CHECK(r->nmodels == 2 && strcmp(r->models[1], "gpt-4o-mini") == 0);
  /* the model each target receives */
  CHECK(strcmp(px_target_model(r, &r->deployments[0], "gpt-4o"), "gpt-4o") == 0);
  CHECK(strcmp(px_target_model(r, &r->deployments[1], "gpt-4o"), "model-b") == 0);
  CHECK(strcmp(px_target_model(r, &r->fallbacks[0], "gpt-4o"), "claude-x") == 0);
  /* defaults */
  const px_upstream_conf_t *a = upc(c, "a"), *b = upc(c, "b");
  CHECK_EQ(a->retry_after_max_ms, 10000);
  CHECK_EQ(a->eject_after, 5);
  CHECK_EQ(a->eject_for_ms, 30000);
  CHECK_EQ(a->weight, 1);
  CHECK_EQ(b->retry_after_max_ms, 2000);
  CHECK_EQ(b->eject_after, 0);
  CHECK_EQ(b->eject_for_ms, 500);
  CHECK_EQ(b->weight, 3);
  CHECK(c->routes[1].balance == PX_BALANCE_LEAST_BUSY);
  CHECK_EQ(c->routes[1].ndeployments, 1);
  CHECK_EQ(c->routes[1].nmodels, 0);

  /* --check names deployments, their models, the balance and the fallbacks */
  char buf[8192] = "";
  FILE *f = fmemopen(buf, sizeof buf - 1, "w");
  if (f != NULL) {
    px_config_print(c, f);
    fclose(f);
    CHECK(strstr(buf, "route gpt-* -> a, b/model-b\n") != NULL);
    CHECK(strstr(buf, "  balance: weighted\n") != NULL);
    CHECK(strstr(buf, "  fallback: an/claude-x, a/cheap\n") != NULL);
    CHECK(strstr(buf, "  models: gpt-4o, gpt-4o-mini\n") != NULL);
    CHECK(strstr(buf, "  eject_for: 500ms\n") != NULL);
  }
  /* route model applies to deployments and fallbacks without their own */
  px_config_t *c2 = parse(UP("a", "") UP(
      "b", "") "[route m]\nupstream = a, b/bm\nmodel = rm\nfallback = b\n");
  if (c2 != NULL) {
    const px_route_conf_t *r2 = &c2->routes[0];
    CHECK(strcmp(px_target_model(r2, &r2->deployments[0], "m"), "rm") == 0);
    CHECK(strcmp(px_target_model(r2, &r2->deployments[1], "m"), "bm") == 0);
    CHECK(strcmp(px_target_model(r2, &r2->fallbacks[0], "m"), "rm") == 0);
  }
  px_config_unref(c2);
  px_config_unref(c);
}

static void test_config_errors(void) {
  expect_err(UP("a", "") "[route x]\nupstream = a,\n",
             "t.conf:5: empty entry in upstream list");
  expect_err(UP("a", "") "[route x]\nupstream = a, nope/m\n",
             "t.conf:5: unknown upstream 'nope' in [route x]");
  expect_err(UP("a", "") "[route x]\nupstream = a/\n", "t.conf:5: invalid upstream 'a/'");
  expect_err(UP("a", "") "[route x]\nupstream = a/m, a/m\n",
             "t.conf:5: upstream 'a/m' listed twice in [route x]");
  expect_err(UP("a", "") "[route x]\nupstream = a\nbalance = fastest\n",
             "t.conf:6: invalid balance 'fastest'");
  expect_err(UP("a", "") UP("b", "") "[route x]\nupstream = a, b/m\nfallback = b/m\n",
             "t.conf:9: fallback 'b/m' is the route's own upstream in [route x]");
  expect_err(UP("a", "") "[route x]\nupstream = a\nfallback = /m\n",
             "t.conf:6: invalid fallback '/m'");
  expect_err(
      UP("a", "") "[route gpt-*]\nupstream = a\nmodels = gpt-4o, claude-3\n",
      "t.conf:6: model 'claude-3' in [route gpt-*] does not match the route's pattern");
  expect_err(UP("a", "") "[route gpt-*]\nupstream = a\nmodels = gpt-*\n",
             "is not a concrete model name");
  expect_err(UP("a", "weight = 0\n") "[route x]\nupstream = a\n",
             "t.conf:4: invalid value '0' for 'weight'");
  expect_err(UP("a", "eject_for = soon\n") "[route x]\nupstream = a\n",
             "t.conf:4: invalid duration 'soon' for 'eject_for'");
  char text[8192];
  size_t n = (size_t)snprintf(text, sizeof text, UP("a", "") "[route x]\nupstream = a/0");
  for (int i = 1; i <= PX_MAX_DEPLOYMENTS; i++)
    n += (size_t)snprintf(text + n, sizeof text - n, ", a/%d", i);
  snprintf(text + n, sizeof text - n, "\n");
  expect_err(text, "more than 64 upstreams in [route x]");
}

static void test_round_robin(void) {
  px_config_t *c = parse(UP("a", "") UP("b", "") UP(
      "c", "") "[route x]\nupstream = a, b, c\nbalance = round_robin\n");
  if (c == NULL) return;
  const px_route_conf_t *r = &c->routes[0];
  for (int i = 0; i < 9; i++) CHECK_EQ(px_balance_pick(c, r, 0, 1000), (size_t)(i % 3));
  /* a retry skips what the request tried */
  size_t d = px_balance_pick(c, r, 1u << 1, 1000); /* next would be 0 */
  CHECK_EQ(d, 0);
  CHECK_EQ(px_balance_pick(c, r, 1u << 1 | 1u << 2, 1000), 0);
  CHECK_EQ(px_balance_pick(c, r, 1u << 0, 1000), 1); /* position 1 is next and fresh */
  px_config_unref(c);
  px_balance_reset();
}

static void test_weighted(void) {
  px_config_t *c = parse(UP("a", "weight = 3\n") UP(
      "b", "") "[route x]\nupstream = a, b\nbalance = weighted\n");
  if (c == NULL) return;
  const px_route_conf_t *r = &c->routes[0];
  unsigned cnt[2] = {0, 0};
  char seq[9] = "";
  for (int i = 0; i < 8; i++) {
    size_t d = px_balance_pick(c, r, 0, 1000);
    cnt[d]++;
    seq[i] = d ? 'b' : 'a';
  }
  CHECK_EQ(cnt[0], 6);
  CHECK_EQ(cnt[1], 2);
  /* smooth: b is not left to the end of each round */
  CHECK(strcmp(seq, "aabaaaba") == 0);
  /* weighted choice among the untried when retrying */
  CHECK_EQ(px_balance_pick(c, r, 1u << 0, 1000), 1);
  px_config_unref(c);
  px_balance_reset();
}

static void test_least_busy(void) {
  px_balance_seed(42);
  px_config_t *c = parse(UP("a", "") UP("b", "") UP(
      "c", "") "[route two]\nupstream = a, b\n"
               "[route three]\nupstream = a, b, c\n");
  if (c == NULL) return;
  const px_route_conf_t *two = &c->routes[0], *three = &c->routes[1];
  px_bal_up_t *a = bal(c, "a"), *b = bal(c, "b"), *cc = bal(c, "c");
  /* in flight decides: with two deployments both are always compared */
  px_balance_begin(a);
  px_balance_begin(a);
  for (int i = 0; i < 20; i++) CHECK_EQ(px_balance_pick(c, two, 0, 1000), 1);
  CHECK_EQ(px_balance_inflight(a), 2);
  px_balance_end(a);
  px_balance_end(a);
  px_balance_end(a); /* never below zero */
  CHECK_EQ(px_balance_inflight(a), 0);
  /* then latency: a answers in 400 ms, b in 10 ms */
  px_balance_result(a, upc(c, "a"), 1, 400, 1000);
  px_balance_result(b, upc(c, "b"), 1, 10, 1000);
  CHECK(px_balance_ewma_ms(a) == 400);
  for (int i = 0; i < 20; i++) CHECK_EQ(px_balance_pick(c, two, 0, 1000), 1);
  /* b busy with 50 requests costs more than a slow but idle a */
  for (int i = 0; i < 50; i++) px_balance_begin(b);
  CHECK_EQ(px_balance_pick(c, two, 0, 1000), 0);
  for (int i = 0; i < 50; i++) px_balance_end(b);
  /* a latency seen long ago weighs less: after a minute idle, a (400 ms
   * halved six times = 6 ms) beats b's fresh 10 ms sample */
  px_balance_result(b, upc(c, "b"), 1, 10, 61000);
  CHECK_EQ(px_balance_pick(c, two, 0, 61000), 0);
  /* three idle deployments without samples: every one gets picked */
  unsigned cnt[3] = {0, 0, 0};
  px_balance_reset();
  for (int i = 0; i < 300; i++) cnt[px_balance_pick(c, three, 0, 1000)]++;
  CHECK(cnt[0] > 30 && cnt[1] > 30 && cnt[2] > 30);
  /* the two choices never draw the same deployment twice: a busy one loses
   * to whichever other is drawn, so it is never picked */
  cc = bal(c, "c");
  for (int i = 0; i < 5; i++) px_balance_begin(cc);
  for (int i = 0; i < 100; i++) CHECK(px_balance_pick(c, three, 0, 1000) != 2);
  px_config_unref(c);
  px_balance_reset();
}

static void test_ejection(void) {
  px_metrics_reset();
  px_config_t *c = parse(UP("a", "eject_after = 3\neject_for = 1s\n") UP(
      "b", "") "[route x]\nupstream = a, b\nbalance = round_robin\n");
  if (c == NULL) return;
  const px_route_conf_t *r = &c->routes[0];
  const px_upstream_conf_t *ua = upc(c, "a");
  px_bal_up_t *a = bal(c, "a");
  uint64_t t = 10000;
  /* two failures, a success: the run starts again */
  CHECK_EQ(px_balance_result(a, ua, 0, 5, t), 0);
  CHECK_EQ(px_balance_result(a, ua, 0, 5, t), 0);
  CHECK_EQ(px_balance_result(a, ua, 1, 5, t), 0);
  CHECK_EQ(px_balance_result(a, ua, 0, 5, t), 0);
  CHECK_EQ(px_balance_result(a, ua, 0, 5, t), 0);
  CHECK(!px_balance_ejected(a, t));
  /* the third in a row ejects it for eject_for */
  CHECK_EQ(px_balance_result(a, ua, 0, 5, t), 1000);
  CHECK(px_balance_ejected(a, t));
  /* late failures of attempts already in flight change nothing */
  CHECK_EQ(px_balance_result(a, ua, 0, 5, t + 1), 0);
  px_buf_t m;
  px_buf_init(&m, 1 << 20);
  px_metrics_render(&m);
  CHECK(strstr(m.data, "proxai_upstream_ejected{upstream=\"a\"} 1\n") != NULL);
  CHECK(strstr(m.data, "proxai_upstream_ejections_total{upstream=\"a\"} 1\n") != NULL);
  /* out of rotation: every pick goes to b, and so does a retry that tried b */
  for (int i = 0; i < 6; i++) CHECK_EQ(px_balance_pick(c, r, 0, t + 500), 1);
  CHECK_EQ(px_balance_pick(c, r, 1u << 1, t + 500), 1);
  CHECK(!px_balance_has_untried(c, r, 1u << 1, t + 500));
  CHECK(px_balance_has_untried(c, r, 0, t + 500));
  CHECK_EQ(px_balance_sweep(t + 400), 600);
  /* back after eject_for; the gauge follows at the sweep */
  CHECK_EQ(px_balance_sweep(t + 1000), 0);
  px_buf_reset(&m);
  px_metrics_render(&m);
  CHECK(strstr(m.data, "proxai_upstream_ejected{upstream=\"a\"} 0\n") != NULL);
  CHECK(!px_balance_ejected(a, t + 1000));
  CHECK(px_balance_has_untried(c, r, 1u << 1, t + 1000));
  /* ejected again without a success in between: twice as long, then 4x ... */
  t += 2000;
  uint64_t want = 2000;
  for (int rep = 0; rep < 12; rep++) {
    for (int i = 0; i < 2; i++) CHECK_EQ(px_balance_result(a, ua, 0, 5, t), 0);
    uint64_t d = px_balance_result(a, ua, 0, 5, t);
    CHECK_EQ(d, want);
    t += d;
    want = want * 2 > PX_EJECT_MAX_MS ? PX_EJECT_MAX_MS : want * 2;
  }
  CHECK_EQ(want, PX_EJECT_MAX_MS); /* capped at 5 minutes */
  /* a success ends the doubling */
  CHECK_EQ(px_balance_result(a, ua, 1, 5, t), 0);
  for (int i = 0; i < 2; i++) px_balance_result(a, ua, 0, 5, t);
  CHECK_EQ(px_balance_result(a, ua, 0, 5, t), 1000);
  /* a success of the ejected one (tried because all were out) brings it back */
  CHECK_EQ(px_balance_result(a, ua, 1, 5, t + 10), 0);
  CHECK(!px_balance_ejected(a, t + 10));
  px_buf_reset(&m);
  px_metrics_render(&m);
  CHECK(strstr(m.data, "proxai_upstream_ejected{upstream=\"a\"} 0\n") != NULL);
  px_buf_free(&m);
  px_config_unref(c);
  px_balance_reset();
  px_metrics_reset();
}

static void test_all_ejected_and_never(void) {
  px_config_t *c = parse(UP("a", "eject_after = 1\n") UP("b", "eject_after = 1\n") UP(
      "c",
      "eject_after = 0\n") "[route x]\nupstream = a, b\nbalance = round_robin\n"
                           "[route y]\nupstream = c\n");
  if (c == NULL) return;
  const px_route_conf_t *r = &c->routes[0];
  px_bal_up_t *a = bal(c, "a"), *b = bal(c, "b"), *cc = bal(c, "c");
  CHECK_EQ(px_balance_result(b, upc(c, "b"), 0, 5, 1000), 30000);
  CHECK_EQ(px_balance_result(a, upc(c, "a"), 0, 5, 2000), 30000);
  /* both out: the least recently ejected (b) is tried, untried ones first */
  CHECK_EQ(px_balance_pick(c, r, 0, 3000), 1);
  CHECK_EQ(px_balance_pick(c, r, 1u << 1, 3000), 0);
  CHECK_EQ(px_balance_pick(c, r, 3, 3000), 1);
  CHECK(!px_balance_has_untried(c, r, 0, 3000));
  CHECK_EQ(px_balance_sweep(3000), 28000);
  /* eject_after = 0: never ejected */
  for (int i = 0; i < 100; i++)
    CHECK_EQ(px_balance_result(cc, upc(c, "c"), 0, 5, 1000), 0);
  CHECK(!px_balance_ejected(cc, 1000));
  px_config_unref(c);
  px_balance_reset();
  px_metrics_reset();
}

/* State is kept by upstream name: a reload keeps an ejection. */
static void test_reload_keeps_state(void) {
  const char *text = UP("a", "eject_after = 1\n")
      UP("b", "") "[route x]\nupstream = a, b\nbalance = round_robin\n";
  px_config_t *c1 = parse(text);
  if (c1 == NULL) return;
  CHECK(px_balance_result(bal(c1, "a"), upc(c1, "a"), 0, 5, 1000) > 0);
  px_config_t *c2 = parse(text);
  if (c2 != NULL) {
    CHECK(px_balance_ejected(bal(c2, "a"), 2000));
    CHECK_EQ(px_balance_pick(c2, &c2->routes[0], 0, 2000), 1);
  }
  px_config_unref(c1);
  px_config_unref(c2);
  px_balance_reset();
  px_metrics_reset();
}

int main(void) {
  test_config_keys();
  test_config_errors();
  test_round_robin();
  test_weighted();
  test_least_busy();
  test_ejection();
  test_all_ejected_and_never();
  test_reload_keeps_state();
  return check_report("test_balance");
}
