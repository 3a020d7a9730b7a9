/* passthru.c - placeholder */
