cat logs/web-1.log logs/web-2.log | awk '$9 == 404 { split($7, p, "?"); print p[1] }' | LC_ALL=C sort -u > audit/paths_404.txt
