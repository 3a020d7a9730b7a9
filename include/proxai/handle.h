/**
 * handle.h - generation-checked handles on objects that end while a
 * callback may still name them.
 *
 * An object takes a slot and gets a handle (its slot and the slot's
 * generation); a callback that may run after the object ended is given the
 * handle, never the pointer, and px_handle_get() gives the object back only
 * while that generation lives. Releasing the slot bumps the generation: every
 * handle on the object goes stale at once, and stays stale when the slot (or
 * the object's memory) is reused. The table never shrinks; it holds one
 * slot per object alive at once (16 bytes each).
 */
#ifndef PROXAI_HANDLE_H
#define PROXAI_HANDLE_H

#include <stddef.h>
#include <stdint.h>

/** A handle: 0 names nothing. Fits a callback's void *. */
typedef uintptr_t px_handle_t;

#define PX_HANDLE_SLOT_BITS 24 /* 16 M objects alive at once per table */
#define PX_HANDLE_SLOT_MASK ((1u << PX_HANDLE_SLOT_BITS) - 1)

typedef struct px_handle_slot {
  void *obj;     /* NULL while free */
  uint32_t gen;  /* the live object's generation, or the next one's */
  uint32_t next; /* free list: the next free slot + 1 */
} px_handle_slot_t;

/** A table of handles; zero-initialised is empty. One owner (one loop). */
typedef struct px_handles {
  px_handle_slot_t *slot;
  uint32_t n, cap;
  uint32_t free; /* the first free slot + 1 */
} px_handles_t;

/** A handle on obj (not NULL); 0 when out of memory. */
px_handle_t px_handle_new(px_handles_t *t, void *obj);
/** Every handle on the object of h goes stale; its slot is reused. */
void px_handle_release(px_handles_t *t, px_handle_t h);
/** The table's memory (all handles stale). */
void px_handles_free(px_handles_t *t);

/** The object of h, or NULL once it was released. */
static inline void *px_handle_get(const px_handles_t *t, px_handle_t h) {
  uint32_t i = (uint32_t)(h & PX_HANDLE_SLOT_MASK);
  if (i >= t->n || t->slot[i].gen != (uint32_t)(h >> PX_HANDLE_SLOT_BITS)) return NULL;
  return t->slot[i].obj;
}

#endif
