sqlite3 db/app.db 'CREATE TABLE schema_migrations (version TEXT PRIMARY KEY);'
