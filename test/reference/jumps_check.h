/* jumps_check.h - the request walk's table of container ends
 * (px_json_request_jumps) against the walker's own skip: every entry a
 * container of at least PX_JSON_JUMP_MIN bytes at its opening offset, in
 * opening order, ending where px_fw_value (reading it, no table) ends it.
 * 1 when sound. */
#ifndef PROXAI_JUMPS_CHECK_H
#define PROXAI_JUMPS_CHECK_H

#include "proxai/fastir.h"
#include "proxai/json.h"

static inline int jumps_sound(const char *p, size_t n, const px_json_jumps_t *j) {
  if (j->base != p || j->len != n || j->n > j->cap) return 0;
  const px_json_jumps_t *was = px_fw_jumps.table;
  px_fw_jumps.table = NULL; /* the walker reads */
  int ok = 1;
  for (size_t k = 0; ok && k < j->n; k++) {
    size_t o = j->v[k][0], e = j->v[k][1];
    px_fw_t w = {p, n, o};
    px_fv_t v;
    ok = (k == 0 || j->v[k - 1][0] < o) && o < n && (p[o] == '{' || p[o] == '[') &&
         e > o && e - o >= PX_JSON_JUMP_MIN && px_fw_value(&w, &v) == 0 &&
         v.raw.len == e - o;
  }
  px_fw_jumps.table = was;
  return ok;
}

#endif
