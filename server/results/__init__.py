"""What each file's runs leave behind: its last result (cache), its timing history and kept
Nsight Compute reports, the kept candidates, and the KB's ranking of its kernels (knowledge).
May import server.editor."""
