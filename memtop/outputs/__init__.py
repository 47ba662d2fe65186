"""What a recording becomes: the report and the Perfetto export."""
