/* server.c - placeholder */
