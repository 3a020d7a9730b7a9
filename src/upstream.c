/* upstream.c - placeholder */
