{-# LANGUAGE DataKinds, TypeFamilies, MonoLocalBinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, NoStarIsType,
             AllowAmbiguousTypes #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Softmax over one beat (the last axis), computed for real (docs/contract.md,
"Activations: softmax").

= Arithmetic

With @m = max_i r_i@ (raw inputs, format @SFixed ii fi@):

1. @d_i = m - r_i >= 0@ (exact, one bit wider);
2. @e_i = exp_table[min(d_i >> s, nE - 1)]@: @exp(-x)@ at the centre of each
   bucket of @2^s@ raw values, rounded half up to the table's fraction bits
   (@fo + 4@); the last entry is 0 (every @d@ from there on rounds to 0);
3. @S = sum_i e_i@, exact (@S > 0@: the maximum's own entry is about 1);
4. @y_i = floor((2 e_i 2^fo + S) / (2 S))@: @e_i / S@ rounded half up to the
   output's @fo@ fraction bits by an exact integer division, then saturated.

The maximum error (a bound, from the table's enumerated error) is written next
to each use in Network.hs.

= Storage

The exponential table is a memory file (@weights/<layer>_softmax.mem@) read by
an asynchronous ROM per element of the beat.

= Hardware and timing

Combinational: a maximum tree, @n@ subtractors, @n@ ROM reads, an adder tree
and @n@ dividers of @w@ bits. No state; as a 'K2C.Stream.mapS' stage it passes
valid and ready through in the same cycle.
-}
module K2C.Softmax
  ( softmax
  ) where

import Clash.Prelude

import K2C.Lut (TableRom (..))

-- | Softmax of a beat; @w@ (given by a type application) is the width of the
-- sum and the division, wide enough for @2 e 2^fo + S@.
softmax
  :: forall w n m s eb ii fi oi fo
   . (KnownNat w, KnownNat n, KnownNat m, 1 <= m, KnownNat eb, KnownNat ii, KnownNat fi,
      KnownNat oi, KnownNat fo)
  => SNat s -> TableRom m (Signed eb) -> Vec (n + 1) (SFixed ii fi) -> Vec (n + 1) (SFixed oi fo)
softmax s (TableRom path) = \xs ->
  let top = maximum (map unSF xs)
      es = map (\x -> resize (unpack (rom (index top (unSF x))) :: Signed eb) :: Signed w) xs
      total = sum es
   in map (\e -> saturateRaw ((shiftL e (natToNum @fo + 1) + total) `div` (2 * total))) es
  where
    rom :: Index m -> BitVector eb
    rom = asyncRomFile (SNat @m) path
    last' = fromInteger (natToInteger @m - 1) :: Signed (ii + fi + 14)
    index top r
      | d >= last' = maxBound
      | otherwise  = fromIntegral d
      where
        d = shiftR (resize top - resize r) (snatToNum s)

-- | A raw result saturated to the output format.
saturateRaw :: forall w oi fo . (KnownNat w, KnownNat oi, KnownNat fo) => Signed w -> SFixed oi fo
saturateRaw q
  | wide > resize hi = maxBound
  | wide < resize lo = minBound
  | otherwise        = sf (SNat @fo) (resize q)
  where
    wide = resize q :: Signed (w + oi + fo)
    hi = maxBound :: Signed (oi + fo)
    lo = minBound :: Signed (oi + fo)
