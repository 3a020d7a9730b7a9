/* check.h - the check macro and failure counter of the unit tests.
 * CHECK(cond) reports file:line and the failed expression and counts the
 * failure; the test goes on, and main ends with return check_report(name),
 * which exits non-zero when any check failed. Test-specific checks
 * (CHECK_STR, CHECK_EQ ...) count into the same `failures`. */
#ifndef PX_TEST_CHECK_H
#define PX_TEST_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                              \
    }                                                                          \
  } while (0)

/* The exit status of a test: 1 when any check failed. */
static inline int check_report(const char *name) {
  if (failures) {
    fprintf(stderr, "%s: %d check(s) failed\n", name, failures);
    return 1;
  }
  printf("%s: ok\n", name);
  return 0;
}

#endif
