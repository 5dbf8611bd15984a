"""Chat messages as every layer sees them: one view of their parts, text, images and token
estimate (:mod:`.view`), and chunk streams (:mod:`.chunks`)."""
