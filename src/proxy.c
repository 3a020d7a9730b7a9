/* proxy.c - placeholder */
