//! The two migration sets mean the same: after both are applied, SQLite and PostgreSQL have
//! the same tables, the same columns (name, type, nullability, primary key) and the same
//! indexes (table, columns in order, unique or not). The sets are kept by hand; this is what
//! notices when one of them is forgotten.

use std::collections::BTreeSet;

use sqlx::Row;

/// One column as both backends can describe it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Column {
    table: String,
    name: String,
    /// `text` or `bigint`, the only two kinds the schema uses (DESIGN: ids and JSON as TEXT,
    /// times and flags as BIGINT), so rows decode the same on both.
    kind: String,
    not_null: bool,
    primary_key: bool,
}

/// One index, whatever created it (`CREATE INDEX`, `UNIQUE`, a primary key).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Index {
    table: String,
    columns: Vec<String>,
    unique: bool,
}

#[derive(Debug, PartialEq, Eq)]
struct Schema {
    tables: BTreeSet<String>,
    columns: BTreeSet<Column>,
    indexes: BTreeSet<Index>,
}

#[tokio::test]
async fn sqlite_and_postgres_migrations_build_the_same_schema() {
    let Some(postgres_url) = crate::postgres::fresh_database_url() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sqlite = sqlite_schema(&dir.path().join("schema.db")).await;
    let postgres = postgres_schema(&postgres_url).await;
    assert!(
        sqlite.tables.len() >= 10,
        "the schema was read: {:?}",
        sqlite.tables
    );
    assert_eq!(sqlite.tables, postgres.tables, "tables differ");
    for (only_in, missing_from, a, b) in [
        ("SQLite", "PostgreSQL", &sqlite.columns, &postgres.columns),
        ("PostgreSQL", "SQLite", &postgres.columns, &sqlite.columns),
    ] {
        let extra: Vec<_> = a.difference(b).collect();
        assert!(
            extra.is_empty(),
            "columns as {only_in} has them but {missing_from} does not: {extra:#?}"
        );
    }
    for (only_in, missing_from, a, b) in [
        ("SQLite", "PostgreSQL", &sqlite.indexes, &postgres.indexes),
        ("PostgreSQL", "SQLite", &postgres.indexes, &sqlite.indexes),
    ] {
        let extra: Vec<_> = a.difference(b).collect();
        assert!(
            extra.is_empty(),
            "indexes {only_in} has but {missing_from} does not: {extra:#?}"
        );
    }
}

fn kind(declared: &str) -> String {
    match declared.to_ascii_lowercase().as_str() {
        "text" | "character varying" | "varchar" => "text".into(),
        "bigint" | "int8" | "integer" | "int" => "bigint".into(),
        other => other.into(),
    }
}

async fn sqlite_schema(path: &std::path::Path) -> Schema {
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true);
    let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
    sqlx::migrate!("../migrations/sqlite")
        .run(&pool)
        .await
        .unwrap();
    let tables: BTreeSet<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' \
         AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_sqlx%'",
    )
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .collect();
    let mut columns = BTreeSet::new();
    let mut indexes = BTreeSet::new();
    for table in &tables {
        let rows = sqlx::query("SELECT name, type, \"notnull\", pk FROM pragma_table_info(?)")
            .bind(table)
            .fetch_all(&pool)
            .await
            .unwrap();
        let mut primary = Vec::new();
        for row in rows {
            let name: String = row.get(0);
            let pk: i64 = row.get(3);
            if pk > 0 {
                primary.push((pk, name.clone()));
            }
            columns.insert(Column {
                table: table.clone(),
                kind: kind(&row.get::<String, _>(1)),
                // A primary key is NOT NULL on PostgreSQL whether or not it says so.
                not_null: row.get::<i64, _>(2) != 0 || pk > 0,
                primary_key: pk > 0,
                name,
            });
        }
        primary.sort();
        let primary: Vec<String> = primary.into_iter().map(|(_, name)| name).collect();
        if !primary.is_empty() {
            indexes.insert(Index {
                table: table.clone(),
                columns: primary.clone(),
                unique: true,
            });
        }
        let list = sqlx::query("SELECT name, \"unique\", origin FROM pragma_index_list(?)")
            .bind(table)
            .fetch_all(&pool)
            .await
            .unwrap();
        for index in list {
            let name: String = index.get(0);
            let mut parts = sqlx::query("SELECT seqno, name FROM pragma_index_info(?)")
                .bind(&name)
                .fetch_all(&pool)
                .await
                .unwrap()
                .into_iter()
                .map(|row| (row.get::<i64, _>(0), row.get::<String, _>(1)))
                .collect::<Vec<_>>();
            parts.sort();
            indexes.insert(Index {
                table: table.clone(),
                columns: parts.into_iter().map(|(_, column)| column).collect(),
                unique: index.get::<i64, _>(1) != 0,
            });
        }
    }
    Schema {
        tables,
        columns,
        indexes,
    }
}

async fn postgres_schema(url: &str) -> Schema {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    sqlx::migrate!("../migrations/postgres")
        .run(&pool)
        .await
        .unwrap();
    let tables: BTreeSet<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = 'public' AND table_name NOT LIKE '_sqlx%'",
    )
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .collect();
    let primary: BTreeSet<(String, String)> = sqlx::query(
        "SELECT c.relname::text, a.attname::text FROM pg_index i \
         JOIN pg_class c ON c.oid = i.indrelid \
         JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public' \
         JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey) \
         WHERE i.indisprimary",
    )
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .map(|row| (row.get(0), row.get(1)))
    .collect();
    let columns = sqlx::query(
        "SELECT table_name::text, column_name::text, data_type::text, is_nullable::text \
         FROM information_schema.columns WHERE table_schema = 'public' \
         AND table_name NOT LIKE '_sqlx%'",
    )
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .map(|row| {
        let table: String = row.get(0);
        let name: String = row.get(1);
        Column {
            primary_key: primary.contains(&(table.clone(), name.clone())),
            kind: kind(&row.get::<String, _>(2)),
            not_null: row.get::<String, _>(3) == "NO",
            table,
            name,
        }
    })
    .collect();
    // Each index with its columns in key order (`indkey` is the order; `ord` keeps it).
    let indexes = sqlx::query(
        "SELECT c.relname::text, i.indisunique, \
                array_agg(a.attname::text ORDER BY k.ord) \
         FROM pg_index i \
         JOIN pg_class c ON c.oid = i.indrelid \
         JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public' \
         CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) \
         JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum \
         WHERE c.relname NOT LIKE '_sqlx%' \
         GROUP BY i.indexrelid, c.relname, i.indisunique",
    )
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .map(|row| Index {
        table: row.get(0),
        unique: row.get(1),
        columns: row.get(2),
    })
    .collect();
    Schema {
        tables,
        columns,
        indexes,
    }
}
