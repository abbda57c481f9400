"""A video-rental store's schema, shaped as the well-known sample databases are (Sakila, Pagila), written here.

Twenty tables of the shapes a real database has: serial and identity keys, composite keys, foreign keys (one
pair of them circular, deferred), an enum, domains (one with a non-ASCII name), text[] arrays, a tsvector kept
by a trigger, a stored generated column, `last_update` kept by triggers, jsonb, a range, and a payment table
partitioned by month into twelve partitions. `fill` writes a store's first rows; `business` is its day: rentals
and payments (into several partitions), returns, price changes, cast changes, reviews, deletes.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

TABLES = [
    "language", "country", "city", "address", "store", "staff", "customer", "actor", "category", "film",
    "film_actor", "film_category", "inventory", "rental", "payment", "review", "wishlist", "promo_code",
    "staff_shift", "audit_log",
]  # fmt: skip
# Columns left out of the capture (a stored generated column: pgoutput never sends it; docs/schema-changes.md).
GENERATED = {"film": ["length_hours"]}


def ddl(schema: str) -> list[str]:
    s = sql.Identifier(schema).as_string(None)
    touched = [t for t in TABLES if t not in ("payment", "audit_log", "promo_code")]
    return [
        f"CREATE SCHEMA {s}",
        f"CREATE TYPE {s}.mpaa_rating AS ENUM ('G', 'PG', 'PG-13', 'R', 'NC-17')",
        f"CREATE DOMAIN {s}.year AS integer CHECK (VALUE >= 1901 AND VALUE <= 2155)",
        f'CREATE DOMAIN {s}."bıgınt" AS bigint',  # noqa: RUF001 - a name not ASCII, on purpose
        f"CREATE FUNCTION {s}.last_updated() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN NEW.last_update = now(); RETURN NEW; END $$",
        f"CREATE TABLE {s}.language (language_id serial PRIMARY KEY, name char(20) NOT NULL, "
        "last_update timestamptz NOT NULL DEFAULT now())",
        f"CREATE TABLE {s}.country (country_id serial PRIMARY KEY, country text NOT NULL, "
        "last_update timestamptz NOT NULL DEFAULT now())",
        f"CREATE TABLE {s}.city (city_id serial PRIMARY KEY, city text NOT NULL, "
        f"country_id int NOT NULL REFERENCES {s}.country, last_update timestamptz NOT NULL DEFAULT now())",
        f"CREATE TABLE {s}.address (address_id serial PRIMARY KEY, address text NOT NULL, address2 text, "
        f"district text NOT NULL, city_id int NOT NULL REFERENCES {s}.city, postal_code text, phone text NOT NULL, "
        "last_update timestamptz NOT NULL DEFAULT now())",
        f"CREATE TABLE {s}.store (store_id serial PRIMARY KEY, manager_staff_id int NOT NULL, "
        f"address_id int NOT NULL REFERENCES {s}.address, last_update timestamptz NOT NULL DEFAULT now())",
        f"CREATE TABLE {s}.staff (staff_id serial PRIMARY KEY, first_name text NOT NULL, last_name text NOT NULL, "
        f"address_id int NOT NULL REFERENCES {s}.address, email text, store_id int NOT NULL REFERENCES {s}.store "
        "DEFERRABLE INITIALLY DEFERRED, active boolean NOT NULL DEFAULT true, username text NOT NULL, "
        "password text, picture bytea, last_update timestamptz NOT NULL DEFAULT now())",
        f"ALTER TABLE {s}.store ADD FOREIGN KEY (manager_staff_id) REFERENCES {s}.staff DEFERRABLE INITIALLY DEFERRED",
        f"CREATE TABLE {s}.customer (customer_id serial PRIMARY KEY, store_id int NOT NULL REFERENCES {s}.store, "
        f"first_name text NOT NULL, last_name text NOT NULL, email text, address_id int NOT NULL REFERENCES "
        f"{s}.address, activebool boolean NOT NULL DEFAULT true, create_date date NOT NULL DEFAULT current_date, "
        "last_update timestamptz DEFAULT now(), active int)",
        f"CREATE TABLE {s}.actor (actor_id serial PRIMARY KEY, first_name text NOT NULL, last_name text NOT NULL, "
        "last_update timestamptz NOT NULL DEFAULT now())",
        f"CREATE TABLE {s}.category (category_id serial PRIMARY KEY, name text NOT NULL, "
        "last_update timestamptz NOT NULL DEFAULT now())",
        f"CREATE TABLE {s}.film (film_id serial PRIMARY KEY, title text NOT NULL, description text, "
        f"release_year {s}.year, language_id int NOT NULL REFERENCES {s}.language, original_language_id int "
        f"REFERENCES {s}.language, rental_duration smallint NOT NULL DEFAULT 3, rental_rate numeric(4,2) NOT NULL "
        "DEFAULT 4.99, length smallint, replacement_cost numeric(5,2) NOT NULL DEFAULT 19.99, "
        f"rating {s}.mpaa_rating DEFAULT 'G', last_update timestamptz NOT NULL DEFAULT now(), "
        "special_features text[], fulltext tsvector NOT NULL DEFAULT ''::tsvector, "
        f'revenue {s}."bıgınt", length_hours numeric(4,2) GENERATED ALWAYS AS (round(length / 60.0, 2)) STORED)',  # noqa: RUF001
        f"CREATE TRIGGER film_fulltext BEFORE INSERT OR UPDATE ON {s}.film FOR EACH ROW EXECUTE FUNCTION "
        "tsvector_update_trigger(fulltext, 'pg_catalog.english', title, description)",
        f"CREATE TABLE {s}.film_actor (actor_id int NOT NULL REFERENCES {s}.actor, film_id int NOT NULL "
        f"REFERENCES {s}.film, last_update timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (actor_id, film_id))",
        f"CREATE TABLE {s}.film_category (film_id int NOT NULL REFERENCES {s}.film, category_id int NOT NULL "
        f"REFERENCES {s}.category, last_update timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (film_id, category_id))",
        f"CREATE TABLE {s}.inventory (inventory_id serial PRIMARY KEY, film_id int NOT NULL REFERENCES {s}.film, "
        f"store_id int NOT NULL REFERENCES {s}.store, last_update timestamptz NOT NULL DEFAULT now())",
        f"CREATE TABLE {s}.rental (rental_id serial PRIMARY KEY, rental_date timestamptz NOT NULL, inventory_id "
        f"int NOT NULL REFERENCES {s}.inventory, customer_id int NOT NULL REFERENCES {s}.customer, return_date "
        f"timestamptz, staff_id int NOT NULL REFERENCES {s}.staff, last_update timestamptz NOT NULL DEFAULT now(), "
        "UNIQUE (rental_date, inventory_id, customer_id))",
        f"CREATE TABLE {s}.payment (payment_id serial, customer_id int NOT NULL REFERENCES {s}.customer, "
        f"staff_id int NOT NULL REFERENCES {s}.staff, rental_id int REFERENCES {s}.rental, amount numeric(5,2) "
        "NOT NULL, payment_date timestamptz NOT NULL, PRIMARY KEY (payment_date, payment_id)) "
        "PARTITION BY RANGE (payment_date)",
        *[
            f"CREATE TABLE {s}.payment_p2025_{m:02} PARTITION OF {s}.payment FOR VALUES FROM "
            f"('2025-{m:02}-01 00:00+00') TO ('{2025 + m // 12}-{m % 12 + 1:02}-01 00:00+00')"
            for m in range(1, 13)
        ],
        f"CREATE TABLE {s}.review (film_id int REFERENCES {s}.film, customer_id int REFERENCES {s}.customer, "
        "stars smallint CHECK (stars BETWEEN 1 AND 5), body text, tags text[], last_update timestamptz NOT NULL "
        "DEFAULT now(), PRIMARY KEY (film_id, customer_id))",
        f"CREATE TABLE {s}.wishlist (customer_id int REFERENCES {s}.customer, film_id int REFERENCES {s}.film, "
        "added_at timestamptz NOT NULL DEFAULT now(), last_update timestamptz NOT NULL DEFAULT now(), "
        "PRIMARY KEY (customer_id, film_id))",
        f"CREATE TABLE {s}.promo_code (code text PRIMARY KEY, discount numeric(4,2) NOT NULL, valid daterange, "
        "rules jsonb)",
        f"CREATE TABLE {s}.staff_shift (staff_id int REFERENCES {s}.staff, day date, hours numeric(4,1), "
        "last_update timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (staff_id, day))",
        f"CREATE TABLE {s}.audit_log (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, at timestamptz NOT NULL "
        "DEFAULT now(), who text, what jsonb)",
        *[
            f"CREATE TRIGGER last_updated BEFORE UPDATE ON {s}.{t} FOR EACH ROW EXECUTE FUNCTION {s}.last_updated()"
            for t in touched
        ],
    ]


def fill(conn: psycopg.Connection[Any], schema: str) -> None:
    """A store's first rows: places, two stores and their staff, customers, a catalogue of films, copies."""
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    with conn.transaction():
        conn.execute("INSERT INTO language (name) VALUES ('English'), ('Français'), ('日本語')")
        conn.execute("INSERT INTO country (country) VALUES ('Türkiye'), ('Canada')")
        conn.execute("INSERT INTO city (city, country_id) VALUES ('İzmir', 1), ('Montréal', 2)")
        conn.execute(
            "INSERT INTO address (address, district, city_id, phone) "
            "SELECT 'street ' || g, 'd' || g % 3, 1 + g % 2, '555-' || g FROM generate_series(1, 30) g"
        )
        conn.execute("INSERT INTO store (manager_staff_id, address_id) VALUES (1, 1), (2, 2)")
        conn.execute(
            "INSERT INTO staff (first_name, last_name, address_id, store_id, username, picture) VALUES "
            "('Mike', 'Hillyer', 3, 1, 'mike', '\\x89504e47'), ('Jon', 'Stephens', 4, 2, 'jon', NULL)"
        )
    conn.execute(
        "INSERT INTO customer (store_id, first_name, last_name, email, address_id, active) "
        "SELECT 1 + g % 2, 'first' || g, 'last' || g, 'c' || g || '@example.com', 5 + g % 25, 1 "
        "FROM generate_series(1, 40) g"
    )
    conn.execute(
        "INSERT INTO actor (first_name, last_name) SELECT 'A' || g, 'Actor' || g FROM generate_series(1, 20) g"
    )
    conn.execute("INSERT INTO category (name) VALUES ('Action'), ('Comedy'), ('Drama'), ('Animation')")
    conn.execute(
        "INSERT INTO film (title, description, release_year, language_id, original_language_id, length, rating, "
        "special_features, revenue) SELECT 'FILM ' || g, 'A tale of ' || g || ' heroes', 1990 + g % 30, 1, "
        "CASE WHEN g % 5 = 0 THEN 3 END, 60 + g * 3, (ARRAY['G','PG','PG-13','R','NC-17'])[1 + g % 5]::mpaa_rating, "
        "CASE WHEN g % 3 = 0 THEN ARRAY['Trailers', 'Deleted Scenes'] WHEN g % 3 = 1 THEN ARRAY[]::text[] END, "
        "g * 100000000000 FROM generate_series(1, 30) g"
    )
    conn.execute(
        "INSERT INTO film_actor (actor_id, film_id) SELECT DISTINCT 1 + (g * 7) % 20, 1 + g % 30 "
        "FROM generate_series(1, 80) g"
    )
    conn.execute("INSERT INTO film_category (film_id, category_id) SELECT g, 1 + g % 4 FROM generate_series(1, 30) g")
    conn.execute("INSERT INTO inventory (film_id, store_id) SELECT 1 + g % 30, 1 + g % 2 FROM generate_series(1, 60) g")
    conn.execute(
        "INSERT INTO promo_code VALUES ('WELCOME', 1.50, '[2025-01-01,2025-07-01)', '{\"first\": true}'), "
        "('SUMMER', 2.00, '[2025-06-01,2025-09-01)', NULL)"
    )
    conn.execute(
        "INSERT INTO staff_shift (staff_id, day, hours) SELECT 1 + g % 2, DATE '2025-01-01' + g, 7.5 "
        "FROM generate_series(1, 10) g"
    )


def business(conn: psycopg.Connection[Any], schema: str, day: int) -> None:
    """One day of the store, in one transaction.

    Rentals and their payments (into the partition of `day`'s month), returns, a price change, a cast change,
    a review, a wish granted, a shift, the audit trail.
    """
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    at = f"2025-{1 + day % 12:02}-{1 + day % 27:02} 12:00+00"
    with conn.transaction():
        for n in range(5):
            rental = conn.execute(
                "INSERT INTO rental (rental_date, inventory_id, customer_id, staff_id) "
                "VALUES (%s::timestamptz + %s * interval '1 minute', %s, %s, %s) RETURNING rental_id",
                (at, n, 1 + (day * 5 + n) % 60, 1 + (day + n) % 40, 1 + n % 2),
            ).fetchone()
            assert rental is not None
            conn.execute(
                "INSERT INTO payment (customer_id, staff_id, rental_id, amount, payment_date) "
                "VALUES (%s, %s, %s, %s, %s::timestamptz + %s * interval '1 minute')",
                (1 + (day + n) % 40, 1 + n % 2, rental[0], 0.99 + n, at, n),
            )
        conn.execute(
            "UPDATE rental SET return_date = rental_date + interval '3 days' WHERE rental_id %% 4 = %s", (day % 4,)
        )
        conn.execute(
            "UPDATE film SET rental_rate = rental_rate + 0.5, description = description || '!' WHERE film_id = %s",
            (1 + day % 30,),
        )
        conn.execute("DELETE FROM film_actor WHERE film_id = %s", (1 + (day * 3) % 30,))
        conn.execute(
            "INSERT INTO film_actor (actor_id, film_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (1 + day % 20, 1 + (day * 3) % 30),
        )
        conn.execute(
            "INSERT INTO review VALUES (%s, %s, %s, %s, %s) ON CONFLICT (film_id, customer_id) DO UPDATE "
            "SET stars = EXCLUDED.stars, body = EXCLUDED.body",
            (1 + day % 30, 1 + day % 40, 1 + day % 5, f"day {day}: güzel", ["fun", None] if day % 2 else None),
        )
        conn.execute(
            "INSERT INTO wishlist (customer_id, film_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (1 + day % 40, 1 + (day * 7) % 30),
        )
        conn.execute(
            "DELETE FROM wishlist WHERE customer_id = %s AND film_id = %s",
            (1 + (day - 1) % 40, 1 + ((day - 1) * 7) % 30),
        )
        conn.execute("UPDATE customer SET email = NULL, active = 0 WHERE customer_id = %s", (1 + day % 40,))
        conn.execute(
            "INSERT INTO staff_shift (staff_id, day, hours) VALUES (%s, DATE '2025-02-01' + %s, 8) ON CONFLICT DO NOTHING",
            (1 + day % 2, day),
        )
        conn.execute("INSERT INTO audit_log (who, what) VALUES (%s, %s)", ("app", f'{{"day": {day}, "rentals": 5}}'))
