/* test_handle.c - generation-checked handles: a handle finds its object
 * only while the object lives, and never a later object in the same slot
 * (the rule "after finalize the exchange is not touched"). */
#include <stdint.h>

#include "check.h"
#include "proxai/handle.h"

int main(void) {
  px_handles_t t = {0};
  int a, b, c;
  CHECK(px_handle_get(&t, 0) == NULL); /* 0 names nothing, even empty */
  px_handle_t ha = px_handle_new(&t, &a);
  px_handle_t hb = px_handle_new(&t, &b);
  CHECK(ha != 0 && hb != 0 && ha != hb);
  CHECK(px_handle_get(&t, ha) == &a);
  CHECK(px_handle_get(&t, hb) == &b);
  CHECK(px_handle_get(&t, 0) == NULL);

  /* released: stale, and stays stale when the slot is reused */
  px_handle_release(&t, ha);
  CHECK(px_handle_get(&t, ha) == NULL);
  CHECK(px_handle_get(&t, hb) == &b);
  px_handle_t hc = px_handle_new(&t, &c);
  CHECK(hc != ha);
  CHECK(px_handle_get(&t, hc) == &c);
  CHECK(px_handle_get(&t, ha) == NULL);
  /* a second release of a stale handle does not free the new owner's slot */
  px_handle_release(&t, ha);
  CHECK(px_handle_get(&t, hc) == &c);

  /* many at once, released in turn: each stale, the others intact */
  enum { N = 1000 };
  static int objs[N];
  px_handle_t h[N];
  for (int i = 0; i < N; i++) h[i] = px_handle_new(&t, &objs[i]);
  for (int i = 0; i < N; i += 2) px_handle_release(&t, h[i]);
  int ok = 1;
  for (int i = 0; i < N; i++)
    if (px_handle_get(&t, h[i]) != (i % 2 ? &objs[i] : NULL)) ok = 0;
  CHECK(ok);
  /* a slot reused many times never matches an old handle */
  px_handle_t first = px_handle_new(&t, &a), cur = first;
  for (int i = 0; i < 10000; i++) {
    px_handle_release(&t, cur);
    cur = px_handle_new(&t, &b);
    if (px_handle_get(&t, first) != NULL) ok = 0;
  }
  CHECK(ok);
  CHECK(px_handle_get(&t, cur) == &b);
  /* a handle beyond the table names nothing */
  CHECK(px_handle_get(&t, (px_handle_t)1 << PX_HANDLE_SLOT_BITS | PX_HANDLE_SLOT_MASK) ==
        NULL);
  px_handles_free(&t);
  CHECK(px_handle_get(&t, hb) == NULL);
  return check_report("handle");
}
