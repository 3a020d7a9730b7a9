/* log.c - placeholder */
