/* anthropic.c - translator for this protocol (work in progress). */
#include "proxai/proto.h"

const px_proto_ops_t px_proto_anthropic = {
    .id = PX_PROTO_ANTHROPIC,
};
