/* replay_main.c - runs a fuzz target without libFuzzer (a unit test).
 *
 * usage: fuzz_X [CORPUS_DIR [ITERATIONS]]
 * Replays every file of the corpus (default: the target's committed corpus,
 * FUZZ_CORPUS_DIR), then ITERATIONS (default 10000, or $FUZZ_ITERS)
 * deterministic pseudo-random mutations of them: bit flips, byte changes,
 * insertions of SSE/JSON tokens, deletions, duplications, truncations and
 * splices. A crash or abort() in the target fails the test. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#ifndef FUZZ_CORPUS_DIR
#define FUZZ_CORPUS_DIR "fuzz/corpus"
#endif

typedef struct {
  uint8_t *d;
  size_t n;
} input_t;

static uint64_t rs = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void) {
  rs ^= rs << 13;
  rs ^= rs >> 7;
  rs ^= rs << 17;
  return rs;
}

static int cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static const char *tokens[] = {
    "\n",
    "\r",
    "\r\n",
    "\n\n",
    ":",
    "data: ",
    "event: ",
    "id: ",
    "[DONE]",
    "{",
    "}",
    "[",
    "]",
    "\"",
    ",",
    "null",
    "true",
    "0",
    "-1",
    "1e999",
    "\\u0000",
    "\"type\"",
    "\"text\"",
    "\"index\":",
    "\"content\":",
    "\"tool_calls\"",
    "\"message_stop\"",
    "\"content_block_delta\"",
    "\"response.completed\"",
    "\"finish_reason\":\"stop\"",
    "\"role\":\"assistant\"",
    "\xff",
    "\xc3",
};

static void mutate(input_t *in, const input_t *all, size_t nall) {
  int steps = 1 + (int)(rnd() % 4);
  for (int s = 0; s < steps; s++) {
    size_t n = in->n;
    switch (rnd() % 8) {
      case 0: /* bit flip */
        if (n) in->d[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8));
        break;
      case 1: /* random byte */
        if (n) in->d[rnd() % n] = (uint8_t)rnd();
        break;
      case 2:
      case 3: { /* insert a token */
        const char *t = tokens[rnd() % (sizeof(tokens) / sizeof(tokens[0]))];
        size_t tl = strlen(t), at = n ? rnd() % (n + 1) : 0;
        in->d = realloc(in->d, n + tl + 1);
        memmove(in->d + at + tl, in->d + at, n - at);
        memcpy(in->d + at, t, tl);
        in->n = n + tl;
        break;
      }
      case 4: /* delete a range */
        if (n > 2) {
          size_t at = 2 + rnd() % (n - 2), len = 1 + rnd() % 32;
          if (len > n - at) len = n - at;
          memmove(in->d + at, in->d + at + len, n - at - len);
          in->n = n - len;
        }
        break;
      case 5: /* duplicate a range */
        if (n > 2) {
          size_t at = 2 + rnd() % (n - 2), len = 1 + rnd() % 64;
          if (len > n - at) len = n - at;
          in->d = realloc(in->d, n + len + 1);
          memmove(in->d + at + len, in->d + at, n - at);
          in->n = n + len;
        }
        break;
      case 6: /* truncate */
        if (n > 2) in->n = 2 + rnd() % (n - 2);
        break;
      case 7: { /* splice the tail of another input */
        const input_t *o = &all[rnd() % nall];
        if (o->n > 2 && n > 2) {
          size_t at = 2 + rnd() % (n - 2), from = 2 + rnd() % (o->n - 2);
          size_t len = o->n - from;
          in->d = realloc(in->d, at + len + 1);
          memcpy(in->d + at, o->d + from, len);
          in->n = at + len;
        }
        break;
      }
    }
  }
  if (in->n >= 1 && rnd() % 4 == 0) in->d[0] = (uint8_t)rnd(); /* other pair/flags */
  if (in->n >= 2 && rnd() % 4 == 0) in->d[1] = (uint8_t)rnd();
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : FUZZ_CORPUS_DIR;
  long iters = argc > 2               ? atol(argv[2])
               : getenv("FUZZ_ITERS") ? atol(getenv("FUZZ_ITERS"))
                                      : 10000;
  DIR *d = opendir(dir);
  if (d == NULL) {
    fprintf(stderr, "cannot open corpus %s\n", dir);
    return 1;
  }
  char **names = NULL;
  size_t nn = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    names = realloc(names, (nn + 1) * sizeof(char *));
    names[nn++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, nn, sizeof(char *), cmp);
  input_t *all = calloc(nn ? nn : 1, sizeof(input_t));
  size_t na = 0;
  for (size_t i = 0; i < nn; i++) {
    char path[4096];
    int pl = snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
    free(names[i]);
    if (pl < 0 || (size_t)pl >= sizeof(path)) continue;
    FILE *f = fopen(path, "rb");
    if (f == NULL) continue;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
      fclose(f);
      continue;
    }
    all[na].d = malloc((size_t)st.st_size + 1);
    all[na].n = fread(all[na].d, 1, (size_t)st.st_size, f);
    fclose(f);
    /* exact-size copy so ASan sees reads past the end */
    uint8_t *c = malloc(all[na].n ? all[na].n : 1);
    memcpy(c, all[na].d, all[na].n);
    LLVMFuzzerTestOneInput(c, all[na].n);
    free(c);
    na++;
  }
  free(names);
  if (na == 0) {
    fprintf(stderr, "empty corpus %s\n", dir);
    free(all);
    return 1;
  }
  for (long i = 0; i < iters; i++) {
    const input_t *src = &all[rnd() % na];
    input_t m;
    m.n = src->n;
    m.d = malloc(src->n + 1);
    memcpy(m.d, src->d, src->n);
    mutate(&m, all, na);
    uint8_t *c = malloc(m.n ? m.n : 1);
    memcpy(c, m.d, m.n);
    LLVMFuzzerTestOneInput(c, m.n);
    free(c);
    free(m.d);
  }
  for (size_t i = 0; i < na; i++) free(all[i].d);
  free(all);
  printf("replayed %zu corpus inputs and %ld mutations\n", na, iters);
  return 0;
}
