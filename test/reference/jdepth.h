/* jdepth.h - the nesting depth of a jansson document, for the harnesses
 * that hold the gateway's reading to jansson's: the one reader takes
 * PX_JSON_MAX_DEPTH, jansson 2048. */
#ifndef PX_REF_JDEPTH_H
#define PX_REF_JDEPTH_H

#include <jansson.h>

/* the nesting depth of v (a scalar: 0) */
static inline int doc_depth(json_t *v) {
  const char *key;
  json_t *m;
  size_t i;
  int d = 0, k;
  if (json_is_array(v)) {
    json_array_foreach(v, i, m) if ((k = doc_depth(m)) > d) d = k;
    return d + 1;
  }
  if (!json_is_object(v)) return 0;
  json_object_foreach(v, key, m) if ((k = doc_depth(m)) > d) d = k;
  return d + 1;
}

#endif
