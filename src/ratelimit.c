/* ratelimit.c - placeholder */
