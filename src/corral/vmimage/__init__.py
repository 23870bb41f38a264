"""VM guest images: the default guest built offline from Debian packages (``build``), the
initramfs archive format (``cpio``), and the image manifest the agent boots from
(``manifest``)."""
