/* responses_stream.c - stream decoder/encoder of this protocol (work in progress). */
