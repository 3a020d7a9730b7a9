/* sse.c - placeholder */
