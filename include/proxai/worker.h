/**
 * worker.h - one worker process's context: its event loop, its current
 * configuration (replaced on SIGHUP), its upstream client, and whether it
 * drains. main.c owns it; the client-side server (server.h) accepts and
 * parses on it, and the request core answers on it.
 */
#ifndef PROXAI_WORKER_H
#define PROXAI_WORKER_H

#include <uv.h>

#include "proxai/upstream.h"

typedef struct px_config px_config_t; /* config.h */

typedef struct px_worker {
  uv_loop_t *loop;
  px_config_t *config;   /**< current; a request holds its own reference */
  px_uclient_t *uclient; /**< the upstream transfers' client */
  int draining;          /**< shutting down: no new request is admitted */
} px_worker_t;

#endif
