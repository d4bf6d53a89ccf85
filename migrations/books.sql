-- The business tables in two books (see `BOOKS_SQL` in src/store.rs): 'live', the company's
-- real books, and 'test', the sandbox that `tg_test_` keys read and write. Same columns and
-- rules as in schema.sql; `book` leads every key, so the uniqueness of tax ids, invoice
-- numbers and series holds per book, and a foreign key can only reach a row of its own book.
-- Each table is built under a new name, filled from the old one (every row into 'live'),
-- then the old table is dropped and the new one takes its name. `src/store.rs` runs this
-- with foreign keys off and checks them before the step commits.

CREATE TABLE clients_books (
    book       TEXT    NOT NULL DEFAULT 'live' CHECK (book IN ('live', 'test')),
    id         TEXT    NOT NULL CHECK (id GLOB 'cli_*'),
    name       TEXT    NOT NULL CHECK (length(trim(name)) > 0),
    tax_id     TEXT    CHECK (tax_id IS NULL OR length(tax_id) = 9),
    email      TEXT,
    address    TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (book, id),
    UNIQUE (book, tax_id)
) STRICT;

INSERT INTO clients_books (book, id, name, tax_id, email, address, created_at, updated_at)
    SELECT 'live', id, name, tax_id, email, address, created_at, updated_at FROM clients;

CREATE TABLE invoice_series_books (
    book            TEXT    NOT NULL DEFAULT 'live' CHECK (book IN ('live', 'test')),
    code            TEXT    NOT NULL
                            CHECK (length(code) BETWEEN 1 AND 10 AND code NOT GLOB '*[^A-Z0-9]*'),
    last_number     INTEGER NOT NULL DEFAULT 0 CHECK (last_number >= 0),
    last_issue_date TEXT,
    PRIMARY KEY (book, code)
) STRICT, WITHOUT ROWID;

INSERT INTO invoice_series_books (book, code, last_number, last_issue_date)
    SELECT 'live', code, last_number, last_issue_date FROM invoice_series;

CREATE TABLE invoices_books (
    book              TEXT    NOT NULL DEFAULT 'live' CHECK (book IN ('live', 'test')),
    id                TEXT    NOT NULL CHECK (id GLOB 'inv_*'),
    client_id         TEXT    NOT NULL,
    kind              TEXT    NOT NULL CHECK (kind IN ('full', 'simplified', 'rectifying')),
    status            TEXT    NOT NULL CHECK (status IN ('draft', 'issued', 'paid', 'void')),
    series            TEXT    NOT NULL,
    number            TEXT,
    issue_date        TEXT,
    due_date          TEXT,
    currency          TEXT    NOT NULL CHECK (length(currency) = 3),
    notes             TEXT,
    gross_cents       INTEGER NOT NULL,
    discount_cents    INTEGER NOT NULL,
    subtotal_cents    INTEGER NOT NULL,
    vat_cents         INTEGER NOT NULL,
    withholding_cents INTEGER NOT NULL,
    total_cents       INTEGER NOT NULL,
    paid_cents        INTEGER NOT NULL DEFAULT 0 CHECK (paid_cents >= 0),
    recipient_name    TEXT,
    recipient_tax_id  TEXT,
    rectifies_id      TEXT,
    rectified_by_id   TEXT,
    void_reason       TEXT,
    issued_at         INTEGER,
    voided_at         INTEGER,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    PRIMARY KEY (book, id),
    UNIQUE (book, number),
    FOREIGN KEY (book, client_id) REFERENCES clients (book, id),
    FOREIGN KEY (book, rectifies_id) REFERENCES invoices (book, id),
    FOREIGN KEY (book, rectified_by_id) REFERENCES invoices (book, id),
    CHECK (status = 'draft' OR (number IS NOT NULL AND issue_date IS NOT NULL)),
    CHECK (status <> 'draft' OR number IS NULL),
    CHECK ((kind = 'rectifying') = (rectifies_id IS NOT NULL)),
    CHECK ((status = 'void') = (void_reason IS NOT NULL))
) STRICT;

INSERT INTO invoices_books (book, id, client_id, kind, status, series, number, issue_date,
        due_date, currency, notes, gross_cents, discount_cents, subtotal_cents, vat_cents,
        withholding_cents, total_cents, paid_cents, recipient_name, recipient_tax_id,
        rectifies_id, rectified_by_id, void_reason, issued_at, voided_at, created_at,
        updated_at)
    SELECT 'live', id, client_id, kind, status, series, number, issue_date, due_date,
        currency, notes, gross_cents, discount_cents, subtotal_cents, vat_cents,
        withholding_cents, total_cents, paid_cents, recipient_name, recipient_tax_id,
        rectifies_id, rectified_by_id, void_reason, issued_at, voided_at, created_at,
        updated_at
    FROM invoices;

CREATE TABLE invoice_lines_books (
    book              TEXT    NOT NULL DEFAULT 'live' CHECK (book IN ('live', 'test')),
    invoice_id        TEXT    NOT NULL,
    position          INTEGER NOT NULL CHECK (position >= 1),
    description       TEXT    NOT NULL,
    quantity          INTEGER NOT NULL CHECK (quantity > 0),
    unit_price_cents  INTEGER NOT NULL,
    discount_percent  INTEGER NOT NULL CHECK (discount_percent BETWEEN 0 AND 100),
    vat_rate          INTEGER NOT NULL CHECK (vat_rate BETWEEN 0 AND 100),
    withholding_rate  INTEGER NOT NULL CHECK (withholding_rate BETWEEN 0 AND 100),
    gross_cents       INTEGER NOT NULL,
    discount_cents    INTEGER NOT NULL,
    net_cents         INTEGER NOT NULL,
    vat_cents         INTEGER NOT NULL,
    withholding_cents INTEGER NOT NULL,
    total_cents       INTEGER NOT NULL,
    PRIMARY KEY (book, invoice_id, position),
    FOREIGN KEY (book, invoice_id) REFERENCES invoices (book, id) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;

INSERT INTO invoice_lines_books (book, invoice_id, position, description, quantity,
        unit_price_cents, discount_percent, vat_rate, withholding_rate, gross_cents,
        discount_cents, net_cents, vat_cents, withholding_cents, total_cents)
    SELECT 'live', invoice_id, position, description, quantity, unit_price_cents,
        discount_percent, vat_rate, withholding_rate, gross_cents, discount_cents, net_cents,
        vat_cents, withholding_cents, total_cents
    FROM invoice_lines;

CREATE TABLE payments_books (
    book         TEXT    NOT NULL DEFAULT 'live' CHECK (book IN ('live', 'test')),
    id           TEXT    NOT NULL CHECK (id GLOB 'pay_*'),
    invoice_id   TEXT    NOT NULL,
    amount_cents INTEGER NOT NULL CHECK (amount_cents > 0),
    currency     TEXT    NOT NULL CHECK (length(currency) = 3),
    paid_on      TEXT    NOT NULL,
    method       TEXT    NOT NULL
                         CHECK (method IN ('transfer', 'card', 'cash', 'direct_debit', 'other')),
    reference    TEXT,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (book, id),
    FOREIGN KEY (book, invoice_id) REFERENCES invoices (book, id)
) STRICT;

INSERT INTO payments_books (book, id, invoice_id, amount_cents, currency, paid_on, method,
        reference, created_at)
    SELECT 'live', id, invoice_id, amount_cents, currency, paid_on, method, reference,
        created_at
    FROM payments;

-- 'sandboxed': a message queued in the test book. It is never 'pending', so a relay that
-- delivers pending rows never sends a rehearsal to a real address.
CREATE TABLE outbox_books (
    book       TEXT    NOT NULL DEFAULT 'live' CHECK (book IN ('live', 'test')),
    id         TEXT    NOT NULL CHECK (id GLOB 'out_*'),
    invoice_id TEXT    NOT NULL,
    recipient  TEXT    NOT NULL,
    subject    TEXT    NOT NULL,
    body       TEXT    NOT NULL,
    state      TEXT    NOT NULL DEFAULT 'pending'
                       CHECK (state IN ('pending', 'delivered', 'failed', 'sandboxed')),
    created_at INTEGER NOT NULL,
    PRIMARY KEY (book, id),
    FOREIGN KEY (book, invoice_id) REFERENCES invoices (book, id),
    CHECK ((book = 'test') = (state = 'sandboxed'))
) STRICT;

INSERT INTO outbox_books (book, id, invoice_id, recipient, subject, body, state, created_at)
    SELECT 'live', id, invoice_id, recipient, subject, body, state, created_at FROM outbox;

-- Children first, so no drop leaves a table pointing at a dropped one for long.
DROP TABLE outbox;
DROP TABLE payments;
DROP TABLE invoice_lines;
DROP TABLE invoices;
DROP TABLE invoice_series;
DROP TABLE clients;

ALTER TABLE clients_books RENAME TO clients;
ALTER TABLE invoice_series_books RENAME TO invoice_series;
ALTER TABLE invoices_books RENAME TO invoices;
ALTER TABLE invoice_lines_books RENAME TO invoice_lines;
ALTER TABLE payments_books RENAME TO payments;
ALTER TABLE outbox_books RENAME TO outbox;

-- The indexes the queries use, with the book leading: every query names one book. A
-- payment page of one invoice reads `payments_by_invoice` in id order (no sort, no scan of
-- the book).
CREATE INDEX invoices_by_client ON invoices (book, client_id);
CREATE INDEX invoices_by_status_due ON invoices (book, status, due_date);
CREATE INDEX invoices_by_issue_date ON invoices (book, issue_date);
CREATE INDEX payments_by_invoice ON payments (book, invoice_id, id);
CREATE INDEX outbox_by_invoice ON outbox (book, invoice_id);
