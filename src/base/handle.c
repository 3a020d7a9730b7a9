/* handle.c - generation-checked handles (handle.h). */
#include "proxai/handle.h"

#include <stdlib.h>

/* A generation fits the handle above its slot bits (32 bits, so a slot is
 * reused 4 G times before a stale handle could match again; 8 bits where a
 * pointer has 32) and is never 0: a handle of 0 names nothing. */
#define GEN_MAX                                                 \
  ((uint32_t)((UINTPTR_MAX >> PX_HANDLE_SLOT_BITS) > UINT32_MAX \
                  ? UINT32_MAX                                  \
                  : (UINTPTR_MAX >> PX_HANDLE_SLOT_BITS)))

px_handle_t px_handle_new(px_handles_t *t, void *obj) {
  uint32_t i;
  if (t->free) {
    i = t->free - 1;
    t->free = t->slot[i].next;
  } else {
    if (t->n == t->cap) {
      uint32_t cap = t->cap ? t->cap * 2 : 64;
      if (cap > PX_HANDLE_SLOT_MASK + 1u) return 0;
      px_handle_slot_t *s = realloc(t->slot, cap * sizeof(*s));
      if (s == NULL) return 0;
      t->slot = s, t->cap = cap;
    }
    i = t->n++;
    t->slot[i].gen = 1;
  }
  t->slot[i].obj = obj;
  return (px_handle_t)t->slot[i].gen << PX_HANDLE_SLOT_BITS | i;
}

void px_handle_release(px_handles_t *t, px_handle_t h) {
  uint32_t i = (uint32_t)(h & PX_HANDLE_SLOT_MASK);
  if (px_handle_get(t, h) == NULL) return; /* stale already */
  px_handle_slot_t *s = &t->slot[i];
  s->obj = NULL;
  s->gen = s->gen == GEN_MAX ? 1 : s->gen + 1;
  s->next = t->free;
  t->free = i + 1;
}

void px_handles_free(px_handles_t *t) {
  free(t->slot);
  *t = (px_handles_t){0};
}
