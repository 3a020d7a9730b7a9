/* translate.c - placeholder */
