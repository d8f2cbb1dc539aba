"""Prompts for speculative decoding (docs/speculative.md), shared by
tests/integration/test_daemon_spec.py and bench/spec_decode.py: input-grounded
tasks (rewrite a ~400-token code file, extract fields from a document), where
the n-gram proposer finds the output in the prompt, and open-ended chat, where
it rarely does."""

CODE = '''import json
import os
import sys


class Inventory:
    """A small inventory of items with a quantity and a price each."""

    def __init__(self, path):
        self.path = path
        self.items = {}
        if os.path.exists(path):
            with open(path) as f:
                self.items = json.load(f)

    def add(self, name, quantity, price):
        if quantity <= 0:
            raise ValueError("quantity must be positive")
        item = self.items.setdefault(name, {"quantity": 0, "price": price})
        item["quantity"] += quantity
        item["price"] = price

    def remove(self, name, quantity):
        item = self.items.get(name)
        if item is None:
            raise KeyError(name)
        if item["quantity"] < quantity:
            raise ValueError("not enough %s in stock" % name)
        item["quantity"] -= quantity
        if item["quantity"] == 0:
            del self.items[name]

    def total_value(self):
        return sum(i["quantity"] * i["price"] for i in self.items.values())

    def save(self):
        with open(self.path, "w") as f:
            json.dump(self.items, f, indent=2, sort_keys=True)


def main(argv):
    inv = Inventory(argv[1])
    for line in sys.stdin:
        op, name, qty, *rest = line.split()
        if op == "add":
            inv.add(name, int(qty), float(rest[0]))
        elif op == "remove":
            inv.remove(name, int(qty))
    inv.save()
    print("total value: %.2f" % inv.total_value())


if __name__ == "__main__":
    main(sys.argv)
'''

DOCUMENT = '''Invoice number: INV-2026-0412
Date: 3 December 2026
Customer: Northwind Trading Company, 42 Harbour Street, Bristol BS1 4QA
Contact: Margaret Ellison (margaret.ellison@northwind.example)
Items: 12 oak desks at 240.00 EUR, 30 office chairs at 85.50 EUR, 4 filing cabinets at 130.00 EUR
Subtotal: 5,965.00 EUR
VAT (20%): 1,193.00 EUR
Total due: 7,158.00 EUR
Payment terms: 30 days from the invoice date, by bank transfer to IBAN GB29 NWBK 6016 1331 9268 19
'''

# name -> (chat messages, what kind of task)
PROMPTS = {
    "rewrite_code": ([{"role": "user", "content":
                       "Rewrite this Python file exactly as it is, with the same names, "
                       "comments and layout:\n\n" + CODE}], "input-grounded"),
    "extract_fields": ([{"role": "user", "content":
                         "From the invoice below, copy out the invoice number, the date, the "
                         "customer's name and address, the contact's e-mail, every item line "
                         "and the total due, one per line, quoting the text exactly.\n\n"
                         + DOCUMENT}], "input-grounded"),
    "open_chat": ([{"role": "user", "content":
                    "Write a short story about a lighthouse keeper who finds a message in a "
                    "bottle."}], "open-ended"),
}
