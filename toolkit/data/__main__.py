"""``python -m toolkit.data`` moved to ``ctk data``: the dataset catalogues belong to the
domains, which toolkit does not import; this stub says where the command went."""
import sys

print("error: the data commands moved to `ctk data list | fetch NAME... | path NAME | verify` "
      "(the catalogues belong to the domains, which cli.py loads)", file=sys.stderr)
sys.exit(2)
