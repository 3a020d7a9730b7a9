/* http_out.c - placeholder */
