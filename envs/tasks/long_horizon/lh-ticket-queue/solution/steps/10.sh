tar -czf inbox.tar.gz inbox && rm -rf inbox && ./queue done
