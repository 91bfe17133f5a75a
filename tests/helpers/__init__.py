"""What the tests share: captures crafted with scapy (`crafting`, `check_crafting`), the lab's
captures and their truth (`lab_captures`), independent tools' counts (`independent`, tshark),
a many-connection capture (`many_connections`), headless Chromium (`browser`) and a fresh
interpreter (`python`)."""
